"""PyTorch DDP with backend="nccl" under drover's torchrun environment (RANK, WORLD_SIZE,
MASTER_ADDR, ... and one GPU per rank through CUDA_VISIBLE_DEVICES), for
scripts/gpu_check.sh. `--local` trains the same model on the same global batches in one
process without torch.distributed; both print final_loss=, which must be equal.

Float64 throughout, so the two runs agree to rounding: each rank's loss is the mean
over its equal share of the global batch and DDP averages the gradients, which is the
gradient of the global mean.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--local", action="store_true", help="one process, no torch.distributed")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=64, help="global batch (divisible by ranks)")
    a = p.parse_args()

    if not torch.cuda.is_available():
        raise SystemExit("ddp_check: no CUDA device visible to torch "
                         f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    torch.cuda.set_device(0)  # each rank sees only its own GPU, as device 0
    dev = torch.device("cuda", 0)
    if a.local:
        rank, world = 0, 1
    else:
        try:
            dist.init_process_group(backend="nccl", init_method="env://", device_id=dev)
        except TypeError:  # torch before 2.3 has no device_id
            dist.init_process_group(backend="nccl", init_method="env://")
        rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch % world:
        raise SystemExit(f"ddp_check: batch {a.batch} not divisible by {world} ranks")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 1)).double().to(dev)
    if not a.local:
        model = DDP(model, device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    w_true = torch.randn(16, 1, generator=gen, dtype=torch.float64)
    share = a.batch // world
    loss_global = None
    for step in range(a.steps):
        x = torch.randn(a.batch, 16, generator=gen, dtype=torch.float64)
        y = torch.sin(x @ w_true)
        xs = x[rank * share:(rank + 1) * share].to(dev)
        ys = y[rank * share:(rank + 1) * share].to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs), ys)
        loss.backward()
        opt.step()
        loss_global = loss.detach().clone()
        if not a.local:
            dist.all_reduce(loss_global, op=dist.ReduceOp.SUM)
            loss_global /= world
    if rank == 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "?"
        print(f"ddp_check world={world} device={torch.cuda.get_device_name(0)} "
              f"torch={torch.__version__} nccl={nccl} "
              f"backend={'none' if a.local else dist.get_backend()}", flush=True)
        print(f"final_loss={loss_global.item():.15e}", flush=True)
    if not a.local:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
