#!/usr/bin/env python3
"""Embed one passage per line with a sentence-transformers model.

Used by `cargo xtask fetch debian-docs-minilm`: writes an (n, dim) float32 .npy
of L2-normalised embeddings, computed in float32 (TF32 off) on the GPU when
PyTorch sees one, else on the CPU, with a progress bar on stderr, and rounded
to float16 precision.
"""
import argparse
import sys
import time

import numpy as np
import torch
from sentence_transformers import SentenceTransformer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True, help="folder of a sentence-transformers model")
    ap.add_argument("--input", required=True, help="text file, one passage per line")
    ap.add_argument("--output", required=True, help=".npy file to write")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    with open(args.input, encoding="utf-8") as f:
        passages = [line.rstrip("\n") for line in f]
    if not passages:
        print(f"{args.input}: no passages", file=sys.stderr)
        return 1
    model = SentenceTransformer(args.model, device=device)
    print(
        f"embedding {len(passages)} passages on {device} "
        f"(torch {torch.__version__}, {torch.get_num_threads()} threads)",
        file=sys.stderr,
        flush=True,
    )
    t = time.time()
    emb = model.encode(
        passages,
        batch_size=args.batch,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=True,
    )
    # Stored at float16 precision, as embedding stores commonly keep them; this
    # also makes the CPU's and the GPU's results agree to the bit almost always.
    emb = emb.astype(np.float16).astype(np.float32)
    np.save(args.output, emb)
    print(
        f"{emb.shape[0]} x {emb.shape[1]} in {time.time() - t:.1f} s "
        f"({emb.shape[0] / (time.time() - t):.0f} passages/s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
