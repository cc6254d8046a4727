"""The thread pool every module carries, as LLVM IR text (docs/abi.md: modules need only libc).

``i32 __kiln_parallel_for(ptr task, ptr closure, i64 total)`` runs
``i32 task(i64 begin, i64 end, ptr closure)`` over [0, total) in contiguous chunks. It returns
0 or the first non-zero task result.

Each of the n threads of a launch owns a contiguous range of the tasks (thread t the t-th
n-th, the caller's thread the first) and claims chunks from its front; a thread done with its
own range claims from the others' in turn. The caller waits only for the claimed chunks to
finish, never for a worker to show up: with one fixed chunk per thread, a worker the OS had
descheduled stalled every kernel on a loaded machine (7-10x); now the others take its range.
Owned ranges keep what each thread does the same from one kernel to the next (the rows of an
image it wrote, it reads next), and a kernel's prefetches of the task after the current one
(x86 convs: the next output block's weights) ask for what the same thread runs next; with
one shared ticket the threads' chunks interleaved, so at two threads each prefetched the
block the other was computing.

Chunk sizes (guided): a claim takes a quarter of what is left of the range, at most
1/(8 x threads) of all tasks and at least an eighth of that, so the tail chunks are short:
the thread done first waits less for the others.

A thread's ticket is 64 bits: the launch number in the high half, the index of the range's
next unit of tasks in the low half (a unit is one task, or 2^k of them for a loop of 2^30
tasks or more). Threads claim with compare-and-swap, so a thread late from a previous launch
can never take a chunk of the next one. The launch's own ticket says whether a launch is
open (its number in the high half) or "closed" (high half all ones) while the caller
rewrites the launch parameters.

Design, for low launch overhead on small kernels:
- Workers are started on first use and stay alive (detached). Between launches a worker spins
  on the launch generation counter for a while (~1 ms) and then sleeps on a condition
  variable, so an idle module does not hold cores away from numpy or other modules.
- A launch closes the ticket, publishes its parameters, opens the ticket (release), then bumps
  the generation that sleeping or spinning workers watch.
- ``busy`` makes launches exclusive: a nested parallel loop, or a second thread calling into
  the module while a launch is running, runs its loop serially in the calling thread.
- Thread count: ``__kiln_num_threads`` if > 0, else sysconf(_SC_NPROCESSORS_ONLN), at most 256.
- After fork() the child has no workers: the pool remembers the pid that started them.
"""

from __future__ import annotations

MAX_WORKERS = 256
SPIN_WORKER = 1 << 15  # pause iterations a worker spins before sleeping (~1 ms)
SPIN_MAIN = 1 << 12  # pause iterations before the launcher starts yielding its core


def pool_ir(arch: str, android: bool, intptr: str) -> str:
    """IR for the pool. arch: 'x86_64', 'aarch64', 'arm', ...; intptr: 'i64' or 'i32'."""
    # Spin-wait hints as intrinsics (inline asm would need each target's asm parser).
    pause_call = {"x86_64": "call void @llvm.x86.sse2.pause()", "i386": "call void @llvm.x86.sse2.pause()",
                  "aarch64": "call void @llvm.aarch64.hint(i32 1)",
                  "arm": "call void @llvm.arm.hint(i32 1)"}.get(arch, "fence seq_cst")
    decl = {"x86_64": "declare void @llvm.x86.sse2.pause()", "i386": "declare void @llvm.x86.sse2.pause()",
            "aarch64": "declare void @llvm.aarch64.hint(i32)", "arm": "declare void @llvm.arm.hint(i32)"}
    sc_nprocs = 0x61 if android else 84
    if intptr == "i32":
        # Plain ARMv7-A has no integer divide instruction (it would need libgcc's __aeabi_uidiv);
        # VFP divides doubles, exactly enough for 32-bit totals and n <= 256.
        chunk_div = ("  %up32 = trunc i64 %up to i32\n  %upf = uitofp i32 %up32 to double\n"
                     "  %nf = uitofp i32 %m to double\n  %qf = fdiv double %upf, %nf\n"
                     "  %q32 = fptoui double %qf to i32\n  %chunk = zext i32 %q32 to i64")
        range_div = ("  %unf = uitofp i32 %units to double\n  %nnf = uitofp i32 %n to double\n"
                     "  %rqf = fdiv double %unf, %nnf\n  %q = fptoui double %rqf to i32")
    else:
        chunk_div = "  %chunk = udiv i64 %up, %m64"
        range_div = "  %q = udiv i32 %units, %n"
    n_to_i32 = "add i32 %n, 0" if intptr == "i32" else f"trunc {intptr} %n to i32"
    return decl.get(arch, "") + "\n" + _TEMPLATE.format(ip=intptr, n_to_i32=n_to_i32, chunk_div=chunk_div, range_div=range_div, pause=pause_call, sc=sc_nprocs, maxw=MAX_WORKERS,
                            spin_worker=SPIN_WORKER, spin_main=SPIN_MAIN)


_TEMPLATE = r"""
@__kiln_num_threads = protected global i32 0, align 4
@pool.gen = internal global i32 0, align 64
@pool.busy = internal global i32 0, align 64
@pool.sleepers = internal global i32 0, align 64
@pool.started = internal global i32 0, align 4
@pool.pid = internal global i32 0, align 4
@pool.ncpu = internal global i32 0, align 4
@pool.active = internal global i32 0, align 4
@pool.task = internal global ptr null, align 8
@pool.closure = internal global ptr null, align 8
@pool.total = internal global i64 0, align 8
@pool.err = internal global i32 0, align 4
@pool.ticket = internal global i64 -4294967296, align 64
@pool.launches = internal global i32 0, align 4
@pool.completed = internal global i32 0, align 64
@pool.ranges = internal global i32 0, align 4
@pool.tickets = internal global [{maxw} x [8 x i64]] zeroinitializer, align 64
@pool.ends = internal global [{maxw} x i32] zeroinitializer, align 4
@pool.minchunk = internal global i32 0, align 4
@pool.maxchunk = internal global i32 0, align 4
@pool.ushift = internal global i64 0, align 8
@pool.start_gen = internal global [{maxw} x i32] zeroinitializer, align 4
@pool.mutex = internal global [128 x i8] zeroinitializer, align 16
@pool.cond = internal global [128 x i8] zeroinitializer, align 16

declare i64 @llvm.ctlz.i64(i64, i1)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach({ip})
declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare {ip} @sysconf(i32)
declare i32 @getpid()
declare i32 @sched_yield()

; Run units [idx, idx + count) of the current launch; record a failure in pool.err.
define internal i32 @pool.run_chunk(i32 %idx, i32 %count) nounwind {{
entry:
  %ush = load i64, ptr @pool.ushift, align 8
  %total = load i64, ptr @pool.total, align 8
  %idx64 = zext i32 %idx to i64
  %begin = shl i64 %idx64, %ush
  %last = add i32 %idx, %count
  %last64 = zext i32 %last to i64
  %end0 = shl i64 %last64, %ush
  %over = icmp sgt i64 %end0, %total
  %end = select i1 %over, i64 %total, i64 %end0
  %some = icmp slt i64 %begin, %end
  br i1 %some, label %run, label %skip
run:
  %task = load ptr, ptr @pool.task, align 8
  %closure = load ptr, ptr @pool.closure, align 8
  %rc = call i32 %task(i64 %begin, i64 %end, ptr %closure)
  %bad = icmp ne i32 %rc, 0
  br i1 %bad, label %record, label %skip
record:
  %ignored = cmpxchg ptr @pool.err, i32 0, i32 %rc seq_cst seq_cst
  ret i32 %rc
skip:
  ret i32 0
}}

; Claim and run chunks of the open launch until none are left: from the range of thread
; `id` first, then from the others' in turn.
define internal void @pool.drain(i32 %id) nounwind {{
entry:
  br label %top
top:
  %t = load atomic i64, ptr @pool.ticket acquire, align 8
  %hi = lshr i64 %t, 32
  %closed = icmp eq i64 %hi, 4294967295
  br i1 %closed, label %out, label %open
open:
  %tag = and i64 %t, -4294967296
  %n = load atomic i32, ptr @pool.ranges monotonic, align 4
  %own = icmp ult i32 %id, %n
  %first = select i1 %own, i32 %id, i32 0
  br label %scan
scan:
  %k = phi i32 [ 0, %open ], [ %k1, %next ]
  %done = icmp uge i32 %k, %n
  br i1 %done, label %out, label %pick
pick:
  %vk = add i32 %first, %k
  %wrap = icmp uge i32 %vk, %n
  %vw = sub i32 %vk, %n
  %v = select i1 %wrap, i32 %vw, i32 %vk
  %slot = getelementptr [{maxw} x [8 x i64]], ptr @pool.tickets, i32 0, i32 %v, i32 0
  %endp = getelementptr [{maxw} x i32], ptr @pool.ends, i32 0, i32 %v
  br label %claim
claim:
  %tv = load atomic i64, ptr %slot acquire, align 64
  %tvtag = and i64 %tv, -4294967296
  %same = icmp eq i64 %tvtag, %tag
  br i1 %same, label %range, label %top
range:
  %idx = trunc i64 %tv to i32
  %end = load atomic i32, ptr %endp monotonic, align 4
  %more = icmp ult i32 %idx, %end
  br i1 %more, label %size, label %next
size:
  ; guided: a quarter of what is left of the range, within [minchunk, maxchunk], at most that
  %left = sub i32 %end, %idx
  %lo = load atomic i32, ptr @pool.minchunk monotonic, align 4
  %hi.c = load atomic i32, ptr @pool.maxchunk monotonic, align 4
  %g = lshr i32 %left, 2
  %small = icmp ult i32 %g, %lo
  %g1 = select i1 %small, i32 %lo, i32 %g
  %large = icmp ugt i32 %g1, %hi.c
  %g2 = select i1 %large, i32 %hi.c, i32 %g1
  %past = icmp ugt i32 %g2, %left
  %g3 = select i1 %past, i32 %left, i32 %g2
  %none = icmp eq i32 %g3, 0
  %take = select i1 %none, i32 1, i32 %g3
  %take64 = zext i32 %take to i64
  %t1 = add i64 %tv, %take64
  %pair = cmpxchg ptr %slot, i64 %tv, i64 %t1 acq_rel acquire
  %ok = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %ok, label %run, label %claim
run:
  %rc = call i32 @pool.run_chunk(i32 %idx, i32 %take)
  %c0 = atomicrmw add ptr @pool.completed, i32 %take release
  br label %top
next:
  %k1 = add i32 %k, 1
  br label %scan
out:
  ret void
}}

define internal ptr @pool.worker(ptr %arg) nounwind {{
entry:
  %id = ptrtoint ptr %arg to i32
  %slot = getelementptr [{maxw} x i32], ptr @pool.start_gen, i32 0, i32 %id
  %g0 = load i32, ptr %slot, align 4
  br label %spin_start
spin_start:
  %seen = phi i32 [ %g0, %entry ], [ %g, %run ], [ %g, %skip ]
  br label %spin
spin:
  %i = phi i32 [ 0, %spin_start ], [ %i1, %spin_more ]
  %g.s = load atomic i32, ptr @pool.gen acquire, align 64
  %new.s = icmp ne i32 %g.s, %seen
  br i1 %new.s, label %got, label %spin_more
spin_more:
  {pause}
  %i1 = add i32 %i, 1
  %tired = icmp ugt i32 %i1, {spin_worker}
  br i1 %tired, label %sleep, label %spin
sleep:
  %s0 = atomicrmw add ptr @pool.sleepers, i32 1 seq_cst
  %l0 = call i32 @pthread_mutex_lock(ptr @pool.mutex)
  br label %sleep_check
sleep_check:
  %g.w = load atomic i32, ptr @pool.gen seq_cst, align 64
  %new.w = icmp ne i32 %g.w, %seen
  br i1 %new.w, label %woke, label %wait
wait:
  %w0 = call i32 @pthread_cond_wait(ptr @pool.cond, ptr @pool.mutex)
  br label %sleep_check
woke:
  %u0 = call i32 @pthread_mutex_unlock(ptr @pool.mutex)
  %s1 = atomicrmw sub ptr @pool.sleepers, i32 1 seq_cst
  br label %got
got:
  %g = phi i32 [ %g.s, %spin ], [ %g.w, %woke ]
  %active = load i32, ptr @pool.active, align 4
  %mine = icmp slt i32 %id, %active
  br i1 %mine, label %run, label %skip
run:
  call void @pool.drain(i32 %id)
  br label %spin_start
skip:
  br label %spin_start
}}

; Number of threads for a launch: __kiln_num_threads, else the online CPUs (cached).
define internal i32 @pool.threads() nounwind {{
entry:
  %req = load i32, ptr @__kiln_num_threads, align 4
  %given = icmp sgt i32 %req, 0
  br i1 %given, label %clamp, label %cpus
cpus:
  %cached = load i32, ptr @pool.ncpu, align 4
  %known = icmp sgt i32 %cached, 0
  br i1 %known, label %clamp, label %ask
ask:
  %n = call {ip} @sysconf(i32 {sc})
  %n32 = {n_to_i32}
  %pos = icmp sgt i32 %n32, 0
  %n1 = select i1 %pos, i32 %n32, i32 1
  store i32 %n1, ptr @pool.ncpu, align 4
  br label %clamp
clamp:
  %t = phi i32 [ %req, %entry ], [ %cached, %cpus ], [ %n1, %ask ]
  %big = icmp sgt i32 %t, {maxw}
  %t1 = select i1 %big, i32 {maxw}, i32 %t
  ret i32 %t1
}}

; Make sure workers 1..n-1 exist in this process; returns how many threads can run (>= 1).
define internal i32 @pool.ensure(i32 %n) nounwind {{
entry:
  %tid = alloca [16 x i8], align 8
  %pid = call i32 @getpid()
  %oldpid = load i32, ptr @pool.pid, align 4
  %same = icmp eq i32 %pid, %oldpid
  br i1 %same, label %have, label %fresh
fresh:
  store i32 %pid, ptr @pool.pid, align 4
  store i32 0, ptr @pool.started, align 4
  store i32 0, ptr @pool.sleepers, align 64
  %mi = call i32 @pthread_mutex_init(ptr @pool.mutex, ptr null)
  %ci = call i32 @pthread_cond_init(ptr @pool.cond, ptr null)
  br label %have
have:
  %started = load i32, ptr @pool.started, align 4
  %gen = load i32, ptr @pool.gen, align 64
  br label %loop
loop:
  %k = phi i32 [ %started, %have ], [ %k1, %created ]
  %id = add i32 %k, 1
  %enough = icmp sge i32 %id, %n
  br i1 %enough, label %done, label %create
create:
  %slot = getelementptr [{maxw} x i32], ptr @pool.start_gen, i32 0, i32 %id
  store i32 %gen, ptr %slot, align 4
  %arg = inttoptr i32 %id to ptr
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @pool.worker, ptr %arg)
  %failed = icmp ne i32 %rc, 0
  br i1 %failed, label %done, label %created
created:
  %t = load {ip}, ptr %tid, align 8
  %dr = call i32 @pthread_detach({ip} %t)
  %k1 = add i32 %k, 1
  store i32 %k1, ptr @pool.started, align 4
  br label %loop
done:
  %have_workers = phi i32 [ %k, %loop ], [ %k, %create ]
  %threads = add i32 %have_workers, 1
  %fewer = icmp slt i32 %threads, %n
  %r = select i1 %fewer, i32 %threads, i32 %n
  ret i32 %r
}}

define internal i32 @__kiln_parallel_for(ptr %task, ptr %closure, i64 %total) nounwind {{
entry:
  %empty = icmp sle i64 %total, 0
  br i1 %empty, label %ret0, label %claim
ret0:
  ret i32 0
claim:
  %pair = cmpxchg ptr @pool.busy, i32 0, i32 1 acquire monotonic
  %won = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %won, label %size, label %serial
serial:
  %rs = call i32 %task(i64 0, i64 %total, ptr %closure)
  ret i32 %rs
size:
  %want = call i32 @pool.threads()
  %want64 = zext i32 %want to i64
  %few = icmp slt i64 %total, %want64
  %tot32 = trunc i64 %total to i32
  %n0 = select i1 %few, i32 %tot32, i32 %want
  %one = icmp sle i32 %n0, 1
  br i1 %one, label %alone, label %launch
alone:
  %ra = call i32 %task(i64 0, i64 %total, ptr %closure)
  store atomic i32 0, ptr @pool.busy release, align 64
  ret i32 %ra
launch:
  %n = call i32 @pool.ensure(i32 %n0)
  ; units of 2^ushift tasks, fewer than 2^30 of them
  %lz = call i64 @llvm.ctlz.i64(i64 %total, i1 true)
  %bits = sub i64 64, %lz
  %excess = sub i64 %bits, 30
  %wide = icmp sgt i64 %excess, 0
  %ush = select i1 %wide, i64 %excess, i64 0
  %unit = shl i64 1, %ush
  %unit1 = sub i64 %unit, 1
  %tu = add i64 %total, %unit1
  %units64 = lshr i64 %tu, %ush
  %units = trunc i64 %units64 to i32
  %m = mul i32 %n, 8
  %m64 = zext i32 %m to i64
  %mm1 = sub i64 %m64, 1
  %up = add i64 %units64, %mm1
{chunk_div}
  %chunk32 = trunc i64 %chunk to i32
  %lo0 = lshr i32 %chunk32, 3
  %lo1 = icmp eq i32 %lo0, 0
  %lo = select i1 %lo1, i32 1, i32 %lo0
{range_div}
  %qn = mul i32 %q, %n
  %r = sub i32 %units, %qn
  store atomic i64 -4294967296, ptr @pool.ticket seq_cst, align 8
  store ptr %task, ptr @pool.task, align 8
  store ptr %closure, ptr @pool.closure, align 8
  store i64 %total, ptr @pool.total, align 8
  store i64 %ush, ptr @pool.ushift, align 8
  store atomic i32 %n, ptr @pool.ranges monotonic, align 4
  store atomic i32 %lo, ptr @pool.minchunk monotonic, align 4
  store atomic i32 %chunk32, ptr @pool.maxchunk monotonic, align 4
  store i32 %n, ptr @pool.active, align 4
  store i32 0, ptr @pool.err, align 4
  store atomic i32 0, ptr @pool.completed monotonic, align 64
  %lcount = atomicrmw add ptr @pool.launches, i32 1 monotonic
  %lnum = and i32 %lcount, 2147483647
  %l64 = zext i32 %lnum to i64
  %open = shl i64 %l64, 32
  br label %ranges
ranges:
  ; thread t owns units [t*q + min(t, r), (t+1)*q + min(t+1, r))
  %rt = phi i32 [ 0, %launch ], [ %rt1, %ranges ]
  %rb = phi i32 [ 0, %launch ], [ %re, %ranges ]
  %extra = icmp ult i32 %rt, %r
  %plus = zext i1 %extra to i32
  %rq = add i32 %rb, %q
  %re = add i32 %rq, %plus
  %endp = getelementptr [{maxw} x i32], ptr @pool.ends, i32 0, i32 %rt
  store atomic i32 %re, ptr %endp monotonic, align 4
  %rb64 = zext i32 %rb to i64
  %tick = or i64 %open, %rb64
  %slot = getelementptr [{maxw} x [8 x i64]], ptr @pool.tickets, i32 0, i32 %rt, i32 0
  store atomic i64 %tick, ptr %slot monotonic, align 64
  %rt1 = add i32 %rt, 1
  %rmore = icmp ult i32 %rt1, %n
  br i1 %rmore, label %ranges, label %publish
publish:
  store atomic i64 %open, ptr @pool.ticket release, align 8
  %g = atomicrmw add ptr @pool.gen, i32 1 seq_cst
  %sleeping = load atomic i32, ptr @pool.sleepers seq_cst, align 64
  %wake = icmp sgt i32 %sleeping, 0
  br i1 %wake, label %broadcast, label %own
broadcast:
  %l = call i32 @pthread_mutex_lock(ptr @pool.mutex)
  %b = call i32 @pthread_cond_broadcast(ptr @pool.cond)
  %u = call i32 @pthread_mutex_unlock(ptr @pool.mutex)
  br label %own
own:
  call void @pool.drain(i32 0)
  br label %wait
wait:
  %i = phi i32 [ 0, %own ], [ %i1, %pause ], [ %i1, %yield ]
  %d = load atomic i32, ptr @pool.completed acquire, align 64
  %all = icmp sge i32 %d, %units
  br i1 %all, label %finish, label %again
again:
  %i1 = add i32 %i, 1
  %long = icmp ugt i32 %i1, {spin_main}
  br i1 %long, label %yield, label %pause
pause:
  {pause}
  br label %wait
yield:
  %y = call i32 @sched_yield()
  br label %wait
finish:
  %err = load i32, ptr @pool.err, align 4
  store atomic i32 0, ptr @pool.busy release, align 64
  ret i32 %err
}}
"""
