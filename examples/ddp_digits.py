"""The main job under DistributedDataParallel: the digits CNN on two oxide devices.

Run with torchrun, one process per device (rank r trains on ``oxide:r``):

    torchrun --standalone --nproc-per-node=2 examples/ddp_digits.py

or ``make demo-ddp``. Each step, every rank takes its half of the same global batch
(the single-process demo's batch of 64 and batch order), DDP averages the gradients
over the ``oxgloo`` backend (Gloo on oxide memory), and every rank applies the same
Adam step. Rank 0 prints loss and test accuracy per epoch, which end where the
single-process demo's do.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_oxide  # noqa: F401
from digits_cnn import DigitsCNN, load_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch, split over the ranks")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("oxide", local % torch.oxide.device_count())
    torch.oxide.set_device(device)
    dist.init_process_group(device_id=device)  # no backend named: oxgloo on an oxide machine
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = (t.to(device) for t in load_data(args.seed))
    model = DDP(DigitsCNN().to(device))  # same initial weights on every rank (seeded; DDP broadcasts rank 0's)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    order = torch.Generator().manual_seed(args.seed)
    per_rank = args.batch_size // world
    if rank == 0:
        print(
            f"{world} ranks on {', '.join(f'oxide:{r % torch.oxide.device_count()}' for r in range(world))}, "
            f"backend {dist.get_backend()}, {per_rank} images per rank per step"
        )
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(len(y_train), generator=order).to(device)
        total = torch.zeros((), device=device)
        for i in range(0, len(y_train), args.batch_size):
            batch = perm[i : i + args.batch_size]
            sel = batch[rank * per_rank : (rank + 1) * per_rank]
            if len(sel) == 0:  # the last, short batch may not reach every rank
                sel = batch[:1]
            loss = F.cross_entropy(model(x_train[sel]), y_train[sel])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.detach() * len(sel)
        dist.all_reduce(total)
        model.eval()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        if rank == 0:
            print(
                f"epoch {epoch:2d}: train loss {total.item() / len(y_train):.4f}  test accuracy {acc:6.2%}", flush=True
            )
    torch.oxide.synchronize()
    if rank == 0:
        print(f"final test accuracy {acc:.2%}, {time.perf_counter() - start:.2f} s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
