"""Graph storage planning (kiln/relay/backend/memory_plan.py): buffers reused by size, images
(texture entries of adreno graphs) reused only by entries of the same scope, shape and dtype."""

from kiln.relay.backend.memory_plan import plan_storage


def chain(n: int):
    """input -> k1 -> k2 -> ... -> kn (each kernel reads the previous entry)."""
    nodes = [{"op": "null", "name": "x", "inputs": []}]
    for i in range(n):
        nodes.append({"op": "tvm_op", "name": f"k{i}", "inputs": [[i, 0, 0]]})
    return nodes, list(range(n + 2)), [[n, 0, 0]]


def test_buffers_alternate_between_two_storages():
    nodes, row_ptr, heads = chain(4)
    storage = plan_storage(nodes, [64] * 5, row_ptr, heads)
    assert storage[1] != storage[2] and storage[1] == storage[3]  # k2 reuses k0's buffer
    assert len(set(storage)) == 3  # the input and two ping-pong buffers


def test_images_reused_only_by_equal_images():
    nodes, row_ptr, heads = chain(6)
    a, b = ("global.texture", (1, 2, 8, 8, 4), "float32"), ("global.texture", (1, 4, 4, 4, 4), "float32")
    kinds = [None, a, a, b, b, a, None]
    storage = plan_storage(nodes, [1024] * 7, row_ptr, heads, kinds)
    assert storage[3] not in (storage[1], storage[2])  # b takes no freed a image
    assert storage[4] not in (storage[1], storage[2], storage[3])  # nor does the next b (k2's is in use)
    assert storage[5] in (storage[1], storage[2])  # a again: a freed a image
    assert storage[6] not in storage[1:6]  # the buffer output takes no image
    for sid in set(storage):
        assert len({kinds[e] for e, s in enumerate(storage) if s == sid}) == 1


def test_buffer_never_takes_a_freed_image():
    nodes, row_ptr, heads = chain(3)
    img = ("global.texture", (1, 1, 4, 4, 4), "float32")
    storage = plan_storage(nodes, [256, 256, 256, 256], row_ptr, heads, [None, img, None, None])
    assert storage[3] != storage[1] and storage[2] != storage[1]
