// oneDNN (2.x) primitives for kiln's dnnl JSON runtime (kiln/runtime/json_runtime.py).
//
// The Python runtime walks a subgraph's JSON nodes and calls one create function per node at
// load time and one exec function per node per run. Tensors cross this boundary as plain
// row-major float32 pointers (NCHW / OIHW / (M, K)); a convolution or dense layer may run in
// a blocked layout that oneDNN picks, so this file owns the reorders around it. Weights come
// from the model's constants: they are reordered once per weight pointer and kept until
// kd_layer_forget (the caller's weight changed in place: set_input, or a weight computed at run time).
//
// Built by kiln/runtime/json_runtime.py: c++ -O2 -shared -fPIC dnnl_json_runtime.cc -ldnnl.
// Every function returns 0 / a handle on success and -1 / NULL on failure, the message in
// kd_last_error().

#include <dnnl.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace dnnl;
using dims = memory::dims;
using tag = memory::format_tag;

namespace {

thread_local std::string g_error;

engine& eng() {
  static engine e(engine::kind::cpu, 0);
  return e;
}

stream& strm() {
  static thread_local stream s(eng());
  return s;
}

tag plain_tag(size_t ndim) {
  switch (ndim) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    case 6: return tag::abcdef;
  }
  throw std::runtime_error("tensors of rank " + std::to_string(ndim) + " are not supported (1 to 6)");
}

memory::desc plain(const dims& d) { return memory::desc(d, memory::data_type::f32, plain_tag(d.size())); }

// Inside a subgraph, 4-d activations stay channels-last (NHWC, "acdb"): oneDNN's fast
// convolutions use it, so only the subgraph's inputs and outputs are reordered.
memory::desc layout(const dims& d, bool nhwc) {
  return nhwc && d.size() == 4 ? memory::desc(d, memory::data_type::f32, tag::acdb) : plain(d);
}

// Post-ops from a string: 's' adds the tensor already in dst (a residual add), 'r' relu,
// 'g' sigmoid (logistic), 't' tanh, 'c' clip (alpha, beta).
primitive_attr post_ops_attr(const char* post, float alpha, float beta) {
  post_ops po;
  for (const char* p = post ? post : ""; *p; ++p) {
    switch (*p) {
      case 's': po.append_sum(1.f); break;
      case 'r': po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f); break;
      case 'g': po.append_eltwise(1.f, algorithm::eltwise_logistic, 0.f, 0.f); break;
      case 't': po.append_eltwise(1.f, algorithm::eltwise_tanh, 0.f, 0.f); break;
      case 'c': po.append_eltwise(1.f, algorithm::eltwise_clip, alpha, beta); break;
      default: throw std::runtime_error(std::string("unknown post-op code '") + *p + "'");
    }
  }
  primitive_attr attr;
  attr.set_post_ops(po);
  return attr;
}

// A layer whose src/weights/dst may be in oneDNN's chosen layouts: the primitive plus the
// buffers and reorders between them and the caller's plain tensors.
struct Layer {
  primitive prim;
  memory::desc src_user, wei_user, dst_user, bias_md, addend_user;
  memory::desc src_md, wei_md, dst_md;
  memory src_mem, wei_mem, dst_mem;  // own buffers when the layout differs from the user's
  bool has_bias = false, has_sum = false;
  const void* wei_from = nullptr;  // the weight pointer wei_mem holds a reordered copy of
};

void convert(const memory::desc& from_md, void* from, const memory::desc& to_md, void* to) {
  memory a(from_md, eng(), from), b(to_md, eng(), to);
  reorder(a, b).execute(strm(), a, b);
}

template <class PD>
Layer* finish(const PD& pd, Layer* L) {
  L->src_md = pd.src_desc();
  L->wei_md = pd.weights_desc();
  L->dst_md = pd.dst_desc();
  if (L->src_md != L->src_user) L->src_mem = memory(L->src_md, eng());
  L->wei_mem = memory(L->wei_md, eng());
  if (L->dst_md != L->dst_user) L->dst_mem = memory(L->dst_md, eng());
  return L;
}

int run_layer(Layer* L, void* src, void* wei, void* bias, void* addend, void* dst) {
  stream& s = strm();
  void* src_p = src;
  if (L->src_mem) {
    convert(L->src_user, src, L->src_md, L->src_mem.get_data_handle());
    src_p = L->src_mem.get_data_handle();
  }
  if (L->wei_from != wei) {  // constants: reorder once per weight buffer
    convert(L->wei_user, wei, L->wei_md, L->wei_mem.get_data_handle());
    L->wei_from = wei;
  }
  void* dst_p = L->dst_mem ? L->dst_mem.get_data_handle() : dst;
  if (L->has_sum) {
    if (L->dst_mem) convert(L->addend_user, addend, L->dst_md, dst_p);
    else if (L->addend_user != L->dst_user) convert(L->addend_user, addend, L->dst_user, dst);
    else if (addend != dst) std::memcpy(dst, addend, L->dst_user.get_size());
  }
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(L->src_md, eng(), src_p)},
      {DNNL_ARG_WEIGHTS, L->wei_mem},
      {DNNL_ARG_DST, memory(L->dst_md, eng(), dst_p)}};
  if (L->has_bias) args[DNNL_ARG_BIAS] = memory(L->bias_md, eng(), bias);
  L->prim.execute(s, args);
  if (L->dst_mem) convert(L->dst_md, dst_p, L->dst_user, dst);
  s.wait();
  return 0;
}

template <class F>
int guard(F f) {
  try {
    return f();
  } catch (const std::exception& e) {
    g_error = e.what();
    return -1;
  }
}

template <class F>
void* guard_ptr(F f) {
  try {
    return f();
  } catch (const std::exception& e) {
    g_error = e.what();
    return nullptr;
  }
}

}  // namespace

extern "C" {

const char* kd_last_error() { return g_error.c_str(); }

int kd_version() {
  const dnnl_version_t* v = dnnl_version();
  return v->major * 10000 + v->minor * 100 + v->patch;
}

// d: N C H W  O KH KW  OH OW  sh sw  pt pl pb pr  dh dw  groups (dilation 1 = none).
// nhwc bits: 1 src, 2 dst, 4 addend are channels-last.
void* kd_conv2d_create(const int64_t* d, int has_bias, const char* post, float alpha, float beta, int nhwc) {
  return guard_ptr([&]() -> void* {
    std::unique_ptr<Layer> L(new Layer);
    int64_t N = d[0], C = d[1], H = d[2], W = d[3], O = d[4], KH = d[5], KW = d[6], OH = d[7], OW = d[8];
    int64_t G = d[17];
    L->src_user = layout({N, C, H, W}, nhwc & 1);
    L->dst_user = layout({N, O, OH, OW}, nhwc & 2);
    L->addend_user = layout({N, O, OH, OW}, nhwc & 4);
    L->wei_user = G == 1 ? plain({O, C, KH, KW})
                         : memory::desc({G, O / G, C / G, KH, KW}, memory::data_type::f32, tag::goihw);
    L->bias_md = plain({O});
    L->has_bias = has_bias;
    L->has_sum = post && std::strchr(post, 's');
    auto any = [](const dims& x) { return memory::desc(x, memory::data_type::f32, tag::any); };
    dims wdims = G == 1 ? dims{O, C, KH, KW} : dims{G, O / G, C / G, KH, KW};
    dims strides{d[9], d[10]}, pad_l{d[11], d[12]}, pad_r{d[13], d[14]}, dil{d[15] - 1, d[16] - 1};
    auto desc = has_bias
        ? convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct,
                                    any({N, C, H, W}), any(wdims), L->bias_md, any({N, O, OH, OW}),
                                    strides, dil, pad_l, pad_r)
        : convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct,
                                    any({N, C, H, W}), any(wdims), any({N, O, OH, OW}), strides, dil,
                                    pad_l, pad_r);
    convolution_forward::primitive_desc pd(desc, post_ops_attr(post, alpha, beta), eng());
    L->prim = convolution_forward(pd);
    return finish(pd, L.release());
  });
}

// src (M, K), weights (N, K) as relay's nn.dense, dst (M, N).
void* kd_dense_create(int64_t M, int64_t K, int64_t N, int has_bias, const char* post, float alpha, float beta) {
  return guard_ptr([&]() -> void* {
    std::unique_ptr<Layer> L(new Layer);
    L->src_user = plain({M, K});
    L->wei_user = plain({N, K});
    L->dst_user = plain({M, N});
    L->addend_user = L->dst_user;
    L->bias_md = plain({N});
    L->has_bias = has_bias;
    L->has_sum = post && std::strchr(post, 's');
    memory::desc wany({N, K}, memory::data_type::f32, tag::any);
    auto desc = has_bias ? inner_product_forward::desc(prop_kind::forward_inference, L->src_user, wany,
                                                       L->bias_md, L->dst_user)
                         : inner_product_forward::desc(prop_kind::forward_inference, L->src_user, wany,
                                                       L->dst_user);
    inner_product_forward::primitive_desc pd(desc, post_ops_attr(post, alpha, beta), eng());
    L->prim = inner_product_forward(pd);
    return finish(pd, L.release());
  });
}

int kd_layer_exec(void* h, void* src, void* wei, void* bias, void* addend, void* dst) {
  return guard([&] { return run_layer(static_cast<Layer*>(h), src, wei, bias, addend, dst); });
}

void kd_layer_free(void* h) { delete static_cast<Layer*>(h); }

// The weight behind the last pointer changed: reorder it again on the next run.
int kd_layer_forget(void* h) {
  static_cast<Layer*>(h)->wei_from = nullptr;
  return 0;
}

// Plain-layout primitives with one or two inputs (pooling, eltwise, binary).
struct Simple {
  primitive prim;
  memory::desc a_md, b_md, dst_md;
  bool binary = false, matmul = false;
};

// d: N C H W OH OW  kh kw  sh sw  pt pl pb pr; alg 0 max, 1 avg with padding counted, 2 avg without.
// nhwc: the input and output are channels-last.
void* kd_pool2d_create(const int64_t* d, int alg, int nhwc) {
  return guard_ptr([&]() -> void* {
    std::unique_ptr<Simple> S(new Simple);
    S->a_md = layout({d[0], d[1], d[2], d[3]}, nhwc);
    S->dst_md = layout({d[0], d[1], d[4], d[5]}, nhwc);
    algorithm a = alg == 0 ? algorithm::pooling_max
                : alg == 1 ? algorithm::pooling_avg_include_padding
                           : algorithm::pooling_avg_exclude_padding;
    pooling_forward::desc desc(prop_kind::forward_inference, a, S->a_md, S->dst_md, {d[8], d[9]},
                               {d[6], d[7]}, {d[10], d[11]}, {d[12], d[13]});
    S->prim = pooling_forward(pooling_forward::primitive_desc(desc, eng()));
    return S.release();
  });
}

// alg: 0 relu, 1 sigmoid, 2 tanh, 3 clip(alpha, beta), 4 exp, 5 sqrt, 6 abs, 7 gelu (erf)
void* kd_eltwise_create(int ndim, const int64_t* shape, int alg, float alpha, float beta, int nhwc) {
  return guard_ptr([&]() -> void* {
    static const algorithm algs[] = {algorithm::eltwise_relu, algorithm::eltwise_logistic,
                                     algorithm::eltwise_tanh, algorithm::eltwise_clip,
                                     algorithm::eltwise_exp, algorithm::eltwise_sqrt,
                                     algorithm::eltwise_abs, algorithm::eltwise_gelu_erf};
    if (alg < 0 || alg > 7) throw std::runtime_error("unknown eltwise algorithm");
    std::unique_ptr<Simple> S(new Simple);
    S->a_md = S->dst_md = layout(dims(shape, shape + ndim), nhwc);
    eltwise_forward::desc desc(prop_kind::forward_inference, algs[alg], S->a_md, alpha, beta);
    S->prim = eltwise_forward(eltwise_forward::primitive_desc(desc, eng()));
    return S.release();
  });
}

// a has the output's shape; b broadcasts (its dims are the output's or 1). alg: 0 add, 1 mul,
// 2 sub, 3 max, 4 min, 5 div. nhwc bits: 1 a (and the output), 2 b are channels-last.
void* kd_binary_create(int ndim, const int64_t* a_dims, const int64_t* b_dims, int alg, int nhwc) {
  return guard_ptr([&]() -> void* {
    static const algorithm algs[] = {algorithm::binary_add, algorithm::binary_mul, algorithm::binary_sub,
                                     algorithm::binary_max, algorithm::binary_min, algorithm::binary_div};
    if (alg < 0 || alg > 5) throw std::runtime_error("unknown binary algorithm");
    std::unique_ptr<Simple> S(new Simple);
    S->a_md = S->dst_md = layout(dims(a_dims, a_dims + ndim), nhwc & 1);
    S->b_md = layout(dims(b_dims, b_dims + ndim), nhwc & 2);
    S->binary = true;
    binary::desc desc(algs[alg], S->a_md, S->b_md, S->dst_md);
    S->prim = binary(binary::primitive_desc(desc, eng()));
    return S.release();
  });
}

// softmax over `axis` of a tensor (channels-last when nhwc and 4-d).
void* kd_softmax_create(int ndim, const int64_t* shape, int axis, int nhwc) {
  return guard_ptr([&]() -> void* {
    std::unique_ptr<Simple> S(new Simple);
    S->a_md = S->dst_md = layout(dims(shape, shape + ndim), nhwc);
    softmax_forward::desc desc(prop_kind::forward_inference, S->a_md, axis);
    S->prim = softmax_forward(softmax_forward::primitive_desc(desc, eng()));
    return S.release();
  });
}

// Batched matrix product: a (B, M, K) times b, stored (B, N, K) when transpose_b (relay's
// batch_matmul default) or (B, K, N), into (B, M, N).
void* kd_matmul_create(int64_t B, int64_t M, int64_t K, int64_t N, int transpose_b) {
  return guard_ptr([&]() -> void* {
    std::unique_ptr<Simple> S(new Simple);
    S->a_md = plain({B, M, K});
    S->b_md = transpose_b ? memory::desc({B, K, N}, memory::data_type::f32, dims{N * K, 1, K})
                          : plain({B, K, N});
    S->dst_md = plain({B, M, N});
    S->matmul = true;
    matmul::desc desc(S->a_md, S->b_md, S->dst_md);
    S->prim = matmul(matmul::primitive_desc(desc, eng()));
    return S.release();
  });
}

// A copy between NCHW and NHWC (to_nhwc: the direction) for a subgraph's 4-d outputs.
void* kd_reorder_create(const int64_t* shape, int to_nhwc) {
  return guard_ptr([&]() -> void* {
    std::unique_ptr<Simple> S(new Simple);
    dims d(shape, shape + 4);
    S->a_md = layout(d, !to_nhwc);
    S->dst_md = layout(d, to_nhwc);
    S->prim = reorder(reorder::primitive_desc(eng(), S->a_md, eng(), S->dst_md));
    return S.release();
  });
}

int kd_simple_exec(void* h, void* a, void* b, void* dst) {
  return guard([&] {
    Simple* S = static_cast<Simple*>(h);
    std::unordered_map<int, memory> args;
    if (S->binary) {
      args[DNNL_ARG_SRC_0] = memory(S->a_md, eng(), a);
      args[DNNL_ARG_SRC_1] = memory(S->b_md, eng(), b);
    } else if (S->matmul) {
      args[DNNL_ARG_SRC] = memory(S->a_md, eng(), a);
      args[DNNL_ARG_WEIGHTS] = memory(S->b_md, eng(), b);
    } else {
      args[DNNL_ARG_SRC] = memory(S->a_md, eng(), a);
    }
    args[DNNL_ARG_DST] = memory(S->dst_md, eng(), dst);
    S->prim.execute(strm(), args);
    strm().wait();
    return 0;
  });
}

void kd_simple_free(void* h) { delete static_cast<Simple*>(h); }

}  // extern "C"
