"""A small PyTorch DDP training job, unmodified torchrun style: it reads RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment (init_method="env://").

Every rank trains on its shard of the same global batch, so the result does not
depend on how the ranks are spread over nodes. Rank 0 prints the final loss on the
whole data set as `final_loss=...`.

  drover run --nodes 2 --nproc-per-node 2 -- python3 examples/ddp_train.py
"""
import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of {world} on {os.environ.get('DROVER_NODE_ID', socket.gethostname())} "
          f"met the group at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
          flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)

    g = torch.Generator().manual_seed(1234)
    x = torch.randn(256, 16, generator=g)
    y = x @ torch.randn(16, 1, generator=g) + 0.1 * torch.randn(256, 1, generator=g)
    per = x.shape[0] // world
    xs, ys = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]

    steps = int(os.environ.get("STEPS", "40"))
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(xs), ys)
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)

    with torch.no_grad():
        full = torch.nn.functional.mse_loss(model(x), y).item()
    if rank == 0:
        print(f"final_loss={full:.8f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
