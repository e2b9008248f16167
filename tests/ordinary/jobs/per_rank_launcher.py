"""A launcher the way srun and mpirun start a job: one process per rank, each with RANK, WORLD_SIZE,
LOCAL_RANK and MASTER_ADDR / MASTER_PORT in its environment (and Slurm's and Open MPI's own
names), all children of this one process, which waits for them and exits with the worst code.

    python per_rank_launcher.py --nproc 2 SCRIPT [ARGS...]
"""
import os
import signal
import socket
import subprocess
import sys


def main() -> int:
    nproc = 2
    args = sys.argv[1:]
    if args[:1] == ["--nproc"]:
        nproc, args = int(args[1]), args[2:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = []
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   SLURM_PROCID=str(rank), SLURM_NTASKS=str(nproc), OMPI_COMM_WORLD_RANK=str(rank),
                   OMPI_COMM_WORLD_SIZE=str(nproc))
        env.setdefault("OMP_NUM_THREADS", "1")     # as torchrun sets it: N ranks on a few cores
        ranks.append(subprocess.Popen([sys.executable, *args], env=env))
    signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in ranks])
    codes = [p.wait() for p in ranks]
    return max((abs(c) for c in codes), default=0)


if __name__ == "__main__":
    sys.exit(main())
