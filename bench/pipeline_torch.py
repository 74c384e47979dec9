# The PyTorch baselines of //bench:pipeline: the same work through torch's own
# machinery, on this machine, in the same run. Each mode prints `RESULT <name> <value>`
# lines; bench/pipeline.cc runs it with Debian's /usr/bin/python3 (python3-torch).
#
#   pipeline_torch.py dataloader --items 20000 --work-us 260 --workers 2
#   pipeline_torch.py queue_tensor --mib 64 --items 12
#   pipeline_torch.py queue_small --items 20000
#   pipeline_torch.py hogwild --workers 2 --steps 3000 --batch 16
import argparse
import sys
import time

import torch
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


def spin(work_ns):
    # The same work as the drover side's: this much CPU time of the calling thread.
    end = time.thread_time_ns() + work_ns
    while time.thread_time_ns() < end:
        pass


class Items(Dataset):
    def __init__(self, n, work_ns):
        self.n, self.work_ns = n, work_ns

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        spin(self.work_ns)
        return torch.full((64,), float(i))


def dataloader(a):
    # torch's DataLoader as people use it: default batch_size (1), `workers` processes.
    dl = DataLoader(Items(a.items, a.work_us * 1000), num_workers=a.workers)
    t = time.perf_counter()
    n = 0
    for _ in dl:
        n += 1
    print(f"RESULT dataloader_{a.workers}_workers {n / (time.perf_counter() - t):.1f}", flush=True)


def produce(q, done, items, numel):
    for i in range(items):
        q.put(torch.full((numel,), float(i)))  # a new tensor per item, moved to shared memory by put
    q.put(None)
    done.wait()  # torch's file-descriptor sharing needs the producer alive until consumed


def consume_rate(items, numel):
    q = mp.Queue(maxsize=2)
    done = mp.Event()
    p = mp.Process(target=produce, args=(q, done, items, numel))
    t = time.perf_counter()
    p.start()
    got = 0
    while True:
        x = q.get()
        if x is None:
            break
        float(x[0])
        got += 1
    dt = time.perf_counter() - t
    done.set()
    p.join()
    return got, dt


def queue_tensor(a):
    got, dt = consume_rate(a.items, a.mib * (1 << 20) // 4)
    print(f"RESULT queue_tensor_ms {1000 * dt / got:.3f}", flush=True)


def queue_small(a):
    got, dt = consume_rate(a.items, 256)  # 1 KiB of float32
    print(f"RESULT queue_small_items_per_s {got / dt:.1f}", flush=True)


def train(model, steps, batch, q):
    torch.set_num_threads(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.rand(steps, batch, 16) * 2 - 1
    y = torch.rand(steps, batch, 1)
    t0 = time.time_ns()
    for s in range(steps):
        opt.zero_grad()
        loss = 0.5 * ((model(x[s]) - y[s]) ** 2).mean()
        loss.backward()
        opt.step()
    q.put((steps, t0, time.time_ns()))


def hogwild(a):
    # torch's Hogwild example with examples/mlp.h's model: 16 -> 32 tanh -> 1, SGD.
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    model.share_memory()
    q = mp.Queue()
    ps = [mp.Process(target=train, args=(model, a.steps, a.batch, q)) for _ in range(a.workers)]
    for p in ps:
        p.start()
    rs = [q.get() for _ in ps]
    for p in ps:
        p.join()
    n = sum(r[0] for r in rs)
    secs = (max(r[2] for r in rs) - min(r[1] for r in rs)) / 1e9
    print(f"RESULT hogwild_updates_per_s {n / secs:.1f}", flush=True)


def main():
    mp.set_start_method("fork")
    torch.set_num_threads(1)
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["dataloader", "queue_tensor", "queue_small", "hogwild"])
    p.add_argument("--items", type=int, default=1000)
    p.add_argument("--work-us", type=int, default=260)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=16)
    a = p.parse_args()
    {"dataloader": dataloader, "queue_tensor": queue_tensor, "queue_small": queue_small, "hogwild": hogwild}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
