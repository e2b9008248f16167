"""A PyTorch Lightning classifier on CPU with the ddp strategy, launched by torchrun.

    torchrun --nproc_per_node=2 lightning_ddp.py --output-dir DIR

Lightning sees torchrun's environment and uses the processes it launched. Validates every
epoch, checkpoints and logs CSV metrics under DIR.
"""
import argparse
import os
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(pl.LightningModule):
    def __init__(self, features=32, classes=4, hidden=256, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def blobs(n, features=32, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, features, generator=torch.Generator().manual_seed(99))
    y = torch.randint(classes, (n,), generator=g)
    return TensorDataset(centres[y] + 1.5 * torch.randn(n, features, generator=g), y)


class MarkStarted(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        path = os.environ.get("HANGDOC_TEST_READY")
        if path and trainer.is_global_zero and trainer.current_epoch == 0 and batch_idx == 0:
            Path(path).write_text("started")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR", "."))
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    out = Path(args.output_dir)

    pl.seed_everything(0)
    train = DataLoader(blobs(8192), batch_size=32, shuffle=True, num_workers=2)
    val = DataLoader(blobs(2048, seed=1), batch_size=128, num_workers=1)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=args.epochs,
                         enable_progress_bar=False, default_root_dir=out,
                         logger=CSVLogger(out / "logs"),
                         callbacks=[ModelCheckpoint(dirpath=out / "checkpoints", monitor="val_loss"), MarkStarted()])
    trainer.fit(Classifier(), train, val)


if __name__ == "__main__":
    main()
