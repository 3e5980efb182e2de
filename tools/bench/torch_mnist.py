"""What the PyTorch peers of qtrain's benchmarks share: reading MNIST's IDX files with the same
normalization as qtrain (pixels / 255, then mean 0.1307 and std 0.3081) and the MLP of
configs/mnist_mlp.yaml (784-1024-1024-10, ReLU, dropout 0.2 / 0.3 / 0.3)."""
import numpy as np
import torch


def read_idx(path, magic):
    with open(path, "rb") as f:
        data = f.read()
    assert int.from_bytes(data[0:4], "big") == magic, f"{path}: not an IDX file with magic {magic:#x}"
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_mnist_train(folder, split="train"):
    """(images (N, 1, 28, 28) float32 normalized, labels (N) int64) of the training split (or "t10k",
    the test split)."""
    images = read_idx(f"{folder}/{split}-images-idx3-ubyte", 0x803)
    labels = read_idx(f"{folder}/{split}-labels-idx1-ubyte", 0x801)
    x = torch.from_numpy(((images.astype(np.float32) / 255.0) - 0.1307) / 0.3081).reshape(-1, 1, 28, 28)
    return x, torch.from_numpy(labels.astype(np.int64))


def init_peer_rank(args):
    """The start of every data-parallel PyTorch peer launched by mpirun: (rank, world) from Open MPI's
    variables, args.threads threads, the seed args.seed, a gloo group at args.master:args.port, and
    this rank's contiguous shard of the training set (the same shards as qtrain's loader):
    (rank, world, x, y)."""
    import os
    import torch.distributed as dist

    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}", rank=rank, world_size=world)
    x_all, y_all = load_mnist_train(args.data)
    shard = x_all.shape[0] // world
    return rank, world, x_all[rank * shard:(rank + 1) * shard], y_all[rank * shard:(rank + 1) * shard]


def mnist_mlp():
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Dropout(0.2),
        torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Dropout(0.3),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Dropout(0.3),
        torch.nn.Linear(1024, 10))
