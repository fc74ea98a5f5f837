"""Two torch.multiprocessing.spawn workers (gloo) on the fake CUDA device, as a multi-GPU job
launched with mp.spawn does it: each learns its rank from its argument, not from RANK.
Rank r allocates (r + 1) MiB, so a report can tell the two apart.

usage: torch_spawn_workload.py WORK_DIR"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world_size)
    x = torch.empty((rank + 1) << 20, dtype=torch.uint8, device="cuda")
    dist.barrier()
    del x
    dist.destroy_process_group()


if __name__ == "__main__":
    init_file = os.path.join(sys.argv[1], "spawn-init")
    if os.path.exists(init_file):
        os.remove(init_file)
    mp.spawn(worker, args=(2, init_file), nprocs=2, join=True)
