"""A hand-written training loop on Hugging Face Accelerate, launched by torchrun on CPU.

    torchrun --nproc_per_node=2 accelerate_loop.py --output-dir DIR

Accelerate reads torchrun's environment (on a machine without GPUs it runs distributed only
with cpu=True: gloo). The loop evaluates every epoch, waits for every process and saves the
whole training state under DIR/state.
"""
import argparse
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 24, generator=g) * 4 - 2
    y = torch.sin(x).sum(1, keepdim=True) + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR", "."))
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    out = Path(args.output_dir)

    accelerator = Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(24, 512), nn.SiLU(), nn.Linear(512, 512), nn.SiLU(), nn.Linear(512, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_loader = DataLoader(make_data(8192, 0), batch_size=32, shuffle=True, num_workers=2)
    eval_loader = DataLoader(make_data(1024, 1), batch_size=128, num_workers=2)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)

    for epoch in range(args.epochs):
        model.train()
        for step, (x, y) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            if epoch == 0 and step == 0 and accelerator.is_main_process and os.environ.get("HANGDOC_TEST_READY"):
                Path(os.environ["HANGDOC_TEST_READY"]).write_text("started")
        model.eval()
        errors = []
        with torch.no_grad():
            for x, y in eval_loader:
                predictions, targets = accelerator.gather_for_metrics((model(x), y))
                errors.append(F.mse_loss(predictions, targets, reduction="none"))
        accelerator.print(f"epoch {epoch}: eval mse {torch.cat(errors).mean().item():.4f}")
        accelerator.wait_for_everyone()
        accelerator.save_state(out / "state")

    accelerator.end_training()


if __name__ == "__main__":
    main()
