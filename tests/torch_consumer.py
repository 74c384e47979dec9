"""The PyTorch side of torch_consumer_test: a consumer using the drover module.

    torch_consumer.py feed QUEUE               reads torch_feeder_program's item, checks
                                               that it shares pages with the writer
    torch_consumer.py loader PROGRAM SEED N    iterates a DataLoader of PROGRAM's MakeItem
    torch_consumer.py other_cluster OBJECT_ID  asks for an object of another cluster
    torch_consumer.py answer QUEUE             takes QUEUE's items and puts an answer for
                                               each into QUEUE-answers (tensors the C++
                                               side reads in place), then closes it;
                                               drover.put/get round trips
    torch_consumer.py drain QUEUE N            takes the N items of a queue whose
                                               producer returned from main before
    torch_consumer.py reference                the API reference: docstrings, the stub

Prints key=value lines for the test (tests/util/driver_program.h reads them).
"""
import gc
import os
import signal
import sys
import time

import torch

import drover


def say(key, value):
    print(f"{key}={value}", flush=True)


def mapping(ptr):
    """'inode:file offset:permissions' of the page holding address ptr in this process."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= ptr < hi:
                return f"{fields[4]}:{int(fields[2], 16) + ptr - lo}:{fields[1]}"
    return "none"


def same_pages(a, b):
    """True if two mapping() strings name the same file and offset (any permissions)."""
    return a.split(":")[:2] == b.split(":")[:2] and a.split(":")[0] != "0"


def shm_mapped():
    """Files of /dev/shm this process maps."""
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "/dev/shm/" in line})


def write_faults(view):
    """True if writing the view's first element kills a child with SIGSEGV."""
    pid = os.fork()
    if pid == 0:
        view.view(-1)[0] = 1
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSEGV


def wait_until(cond, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.002)
    return False


def feed(queue):
    drover.init()
    q = drover.Queue.open(queue, timeout=60)
    item = q.get(timeout=60)
    sealed, shared, small = item["sealed"], item["shared"], item["small"]
    say("rest", list(q))  # the writer closed the queue: iteration ends
    try:
        q.get(timeout=1)
    except drover.Error as e:
        say("get_after_close", e.code)
    say("keys", ",".join(sorted(item)))
    say("sealed", f"{sealed.dtype}{list(sealed.shape)}")
    say("sealed_values_ok", torch.equal(sealed.view(-1), torch.arange(65536, dtype=torch.float32) * 0.5))
    mine = mapping(sealed.data_ptr())
    say("sealed_mapping", mine)
    say("sealed_same_pages", same_pages(mine, item["sealed_mapping"]))
    say("sealed_write_faults", write_faults(sealed))
    # The same object again, by id: a second view of the same pages.
    again = drover.get_tensor(item["sealed_id"], timeout=10)
    say("by_id_same_pages", same_pages(mapping(again.data_ptr()), mine) and torch.equal(again, sealed))
    say("small", small.tolist())
    shared_mapping = mapping(shared.data_ptr())
    say("shared_mapping", shared_mapping)
    say("shared_same_pages", same_pages(shared_mapping, item["shared_mapping"]))
    say("shared_first", float(shared[0]))
    # Ping-pong with the writer through the shared pages.
    shared[1] = 42
    answered = wait_until(lambda: float(shared[2]) == 7)
    shared[3] = 99
    say("pingpong", "ok" if answered else "no answer")
    # The item's object is this process's: freed with its last view.
    sealed_id = item["sealed_id"]
    del item, sealed, again
    gc.collect()

    def freed():
        try:
            drover.get_tensor(sealed_id, timeout=0.2)
            return False
        except drover.Error:
            return True

    say("freed", wait_until(freed, 10))
    say("shm_mapped", shm_mapped() or "none")


def loader(program, seed, n):
    drover.init(worker_program=program)
    data = drover.DataLoader("MakeItem", range(n), num_workers=2, prefetch=4, seed=seed, cpus=0.5,
                             name="consumer-test")
    say("len", len(data))
    weights = torch.arange(64 * 1024) % 97 + 1

    def checksum(t):
        return int((t.reshape(-1).to(torch.int64) * weights).sum())

    ordered = []
    for t in data:  # as a torch.utils.data.DataLoader
        if not ordered:
            say("first", f"{t.dtype}{list(t.shape)} {mapping(t.data_ptr()).split(':')[-1]}")
        ordered.append(checksum(t))
    for i, c in enumerate(ordered):
        say(f"item_{i}", c)
    say("again_equal", [checksum(t) for t in data] == ordered)  # a second pass, new workers
    unordered = drover.DataLoader("MakeItem", range(n), num_workers=2, prefetch=4, seed=seed, cpus=0.5,
                                  ordered=False)
    say("unordered_same_set", sorted(checksum(t) for t in unordered) == sorted(ordered))
    # Batched inputs: 5 pairs (a list of tuples) in batches of 2, and a range of 5.
    pairs = drover.DataLoader("SumPairs", [(i, i + 1) for i in range(5)], batch_size=2, num_workers=1, cpus=0.5)
    say("batched_pairs", [v // 10 for v in pairs])
    indices = drover.DataLoader("SumIndices", range(3, 8), batch_size=2, num_workers=1, cpus=0.5)
    say("batched_range", [v // 10 for v in indices])
    try:
        list(drover.DataLoader("NoSuchFunction", range(3), num_workers=1, max_retries=0, cpus=0.5))
        say("unknown_function", "no error")
    except drover.Error as e:
        say("unknown_function", str(e).replace("\n", " "))


def other_cluster(object_id):
    drover.init()
    before = drover.store_usage()["objects"]
    start = time.monotonic()
    try:
        drover.get_tensor(object_id, timeout=60)
        say("error", "none")
    except drover.Error as e:
        say("code", e.code)
        say("error", str(e))
    say("seconds", f"{time.monotonic() - start:.3f}")
    say("objects_before", before)
    say("objects_after", drover.store_usage()["objects"])
    say("shm_mapped", shm_mapped() or "none")


def answer(queue):
    drover.init()
    work = drover.Queue.open(queue, timeout=60)
    answers = drover.Queue.open(queue + "-answers", timeout=60)
    n = 0
    for item in work:  # ends when the producer closed it and it is drained
        x = item["x"]
        # y (256 KiB) is written once into this node's store; the C++ reader maps it.
        answers.put({"index": item["index"], "total": float(x.sum()), "y": x * 2,
                     "note": f"answer {item['index']}"}, timeout=30)
        n += 1
    say("taken", n)
    # A value that cannot be sent names itself; nothing is queued.
    try:
        answers.put({"ok": 1, "bad": object()})
        say("bad_put", "no error")
    except ValueError as e:
        say("bad_put", str(e).replace("\n", " "))
    answers.close()  # the producer's iteration ends
    try:
        answers.put(1)
        say("put_after_close", "no error")
    except drover.Error as e:
        say("put_after_close", e.code)
    # drover.put / drover.get: values with tensors, by reference.
    big = torch.arange(64 * 1024, dtype=torch.int64)  # 512 KiB: a store object
    ref = drover.put({"t": big, "s": "hi", "small": torch.tensor([1.5, 2.5]), "n": [1, (2, 3)]})
    got = drover.get(ref, timeout=30)
    say("put_get", torch.equal(got["t"], big) and got["s"] == "hi" and got["n"] == [1, [2, 3]]
        and got["small"].tolist() == [1.5, 2.5])
    say("put_get_store_view", mapping(got["t"].data_ptr()).split(":")[-1])
    say("ref_id_job", ref.id.split(".")[0] == drover.job_id())
    try:
        drover.put(torch.zeros(2, dtype=torch.complex64))
        say("bad_dtype", "no error")
    except ValueError as e:
        say("bad_dtype", str(e))


def drain(queue, n):
    drover.init()
    q = drover.Queue.open(queue, timeout=60)
    indices = []
    ok = True
    for item in q:
        indices.append(item["index"])
        ok = ok and bool((item["x"] == float(item["index"])).all())
    say("indices", indices == list(range(n)))
    say("count", len(indices))
    say("values_ok", ok)


def reference():
    import inspect
    import pydoc
    text = pydoc.render_doc(drover, renderer=pydoc.plaintext)
    say("help_has_put", "put(value, timeout=None)" in text and "Queue.open(name, timeout=10.0)" in text)
    missing = []
    for name, obj in vars(drover).items():
        if name.startswith("__"):
            continue
        if callable(obj) and not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr not in ("__iter__", "__next__", "__len__", "__init__"):
                    continue
                doc = getattr(member, "__doc__", None)
                if not (doc or "").strip():
                    missing.append(f"{name}.{attr}")
    say("undocumented", ",".join(sorted(missing)) or "none")
    stub = os.path.join(os.path.dirname(drover.__file__), "drover.pyi")
    say("stub_beside_module", os.path.exists(stub))
    if os.path.exists(stub):
        import ast
        with open(stub) as f:
            tree = ast.parse(f.read())
        declared = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        public = {name for name in vars(drover) if not name.startswith("__")}
        say("stub_missing", ",".join(sorted(public - declared)) or "none")


def main():
    mode = sys.argv[1]
    if mode == "feed":
        feed(sys.argv[2])
    elif mode == "loader":
        loader(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "other_cluster":
        other_cluster(sys.argv[2])
    elif mode == "answer":
        answer(sys.argv[2])
    elif mode == "drain":
        drain(sys.argv[2], int(sys.argv[3]))
    elif mode == "reference":
        reference()
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
