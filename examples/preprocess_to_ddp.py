"""Preprocessing on the cluster feeding PyTorch DDP: the PyTorch variant of
examples/preprocess_to_ddp.cc. Every rank of a 2-node DDP job (torch.distributed, gloo on
CPU, started by drover with the torchrun environment: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) iterates a drover DataLoader whose workers run the C++ program's MakeBatch
on both nodes: each batch is written into the store of the node that made it and reaches
the rank as a read-only torch.Tensor view of that store (in place on the same node,
pulled once to the other), never copied into the Python process.

  bazel build //examples:preprocess_to_ddp //python:drover
  drover up --nodes 2
  drover run --nodes 2 --nproc-per-node 1 --env PYTHONPATH=$PWD/bazel-bin/python -- \\
      /usr/bin/python3 examples/preprocess_to_ddp.py \\
      --worker-program $PWD/bazel-bin/examples/preprocess_to_ddp --steps 40
  PYTHONPATH=bazel-bin/python python3 examples/preprocess_to_ddp.py \\
      --worker-program bazel-bin/examples/preprocess_to_ddp --steps 40 --local --ranks 2

The second run trains the same model in one process on the same batches (the same
loaders, with every rank's seed), averaging the ranks' gradients as DDP's allreduce does,
so it ends with exactly the same loss and weights (`final_loss=`,
`final_weights_checksum=`): DDP divides each rank's gradient by the world size and sums
them, and for two ranks that sum is one exact addition either way.

Flags as the C++ example's: --steps N (60), --global-batch B (64), --lr X (0.05),
--seed S (1), --workers W (2 loader workers per rank), --prefetch P (4), --local,
--ranks R (with --local), --result-file PATH (rank 0 writes its final lines there too).
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import drover

INPUTS = 16  # examples/mlp.h kIn: 16 inputs, then the target, per row


def batch_specs(args, rank, world):
    """Rank `rank`'s batches: BatchSpec(step, lo, hi, data_seed) of preprocess_to_ddp.cc."""
    lo = args.global_batch * rank // world
    hi = args.global_batch * (rank + 1) // world
    return [(step, lo, hi, args.seed) for step in range(args.steps)]


def loader(args, rank, world):
    return drover.DataLoader("MakeBatch", batch_specs(args, rank, world), num_workers=args.workers,
                             prefetch=args.prefetch, seed=args.seed * 1000 + rank, cpus=0.5,
                             name=f"rank{rank}")


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(INPUTS, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def rank_loss(model, batch):
    """The mean squared error of one rank's batch (a read-only view: only read)."""
    return torch.nn.functional.mse_loss(model(batch[:, :INPUTS]), batch[:, INPUTS:])


def in_store(t):
    """True if the tensor's memory is a shared mapping of the store's arena."""
    ptr = t.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= ptr < hi:
                return "drover-arena" in line and fields[1].endswith("s")
    return False


def finish(args, model, loss, world):
    checksum = sum(float(v) for p in model.parameters() for v in p.detach().reshape(-1).double())
    result = f"ranks={world}\nfinal_loss={loss:.9g}\nfinal_weights_checksum={checksum:.9g}\n"
    print(result, end="", flush=True)
    if args.result_file:
        with open(args.result_file, "w") as out:
            out.write(result)


def run_local(args):
    """Every rank's batches in this process; gradients averaged as DDP averages them."""
    model = make_model(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss = float("nan")
    ranks = [iter(loader(args, r, args.ranks)) for r in range(args.ranks)]
    for _ in range(args.steps):
        grads, losses = [], []
        for r in range(args.ranks):
            opt.zero_grad()
            l = rank_loss(model, next(ranks[r]))
            l.backward()
            grads.append([p.grad / args.ranks for p in model.parameters()])
            losses.append(l.detach() / args.ranks)
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads)
        opt.step()
        loss = float(sum(losses))
    finish(args, model, loss, args.ranks)


def run_ddp(args):
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model(args.seed)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss = float("nan")
    read_in_place = 0
    for step, batch in enumerate(loader(args, rank, world)):
        read_in_place += in_store(batch)
        opt.zero_grad()
        l = rank_loss(ddp, batch)
        l.backward()  # DDP's allreduce averages the gradients
        opt.step()
        total = l.detach() / world
        dist.all_reduce(total)
        loss = float(total)
    print(f"rank {rank}: {args.steps} batches, {read_in_place} read in place from a store", flush=True)
    if rank == 0:
        finish(args, model, loss, world)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker-program", required=True, help="bazel-bin/examples/preprocess_to_ddp (has MakeBatch)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--local", action="store_true")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--result-file", default="")
    args = p.parse_args()
    torch.set_num_threads(1)  # the same arithmetic in every process
    drover.init(worker_program=os.path.abspath(args.worker_program))
    if args.local:
        run_local(args)
    else:
        run_ddp(args)


if __name__ == "__main__":
    main()
