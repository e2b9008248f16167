"""transformers.Trainer fine-tuning a tiny, randomly initialised BERT classifier on CPU.

    torchrun --nproc_per_node=2 hf_trainer.py --output-dir DIR

The model is built from a config (nothing is downloaded); the task is synthetic: is token 7
in the sequence? Evaluates and saves a checkpoint every epoch, logs every 20 steps.
"""
import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainerCallback,  # noqa: E402
                          TrainingArguments)

VOCAB, LENGTH = 100, 24


class ContainsSeven(Dataset):
    def __init__(self, size, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(8, VOCAB, (size, LENGTH), generator=g)
        self.labels = torch.randint(2, (size,), generator=g)
        where = torch.randint(1, LENGTH, (size,), generator=g)
        rows = self.labels.nonzero().squeeze(1)
        self.ids[rows, where[rows]] = 7
        self.ids[:, 0] = 1     # a [CLS]-like first token

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "attention_mask": torch.ones(LENGTH, dtype=torch.long),
                "labels": self.labels[index]}


class MarkStarted(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        path = os.environ.get("HANGDOC_TEST_READY")
        if path and state.global_step == 1 and state.is_world_process_zero:
            Path(path).write_text("started")


def accuracy(prediction):
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR", "."))
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()

    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=LENGTH, num_labels=2)
    model = BertForSequenceClassification(config)
    training = TrainingArguments(
        output_dir=str(Path(args.output_dir) / "trainer"), use_cpu=True, num_train_epochs=args.epochs,
        per_device_train_batch_size=16, per_device_eval_batch_size=64, learning_rate=1e-3,
        eval_strategy="epoch", save_strategy="epoch", logging_steps=20, report_to="none",
        dataloader_num_workers=2, seed=0)
    trainer = Trainer(model=model, args=training, train_dataset=ContainsSeven(4096, 0),
                      eval_dataset=ContainsSeven(512, 1), compute_metrics=accuracy, callbacks=[MarkStarted()])
    trainer.train()


if __name__ == "__main__":
    main()
