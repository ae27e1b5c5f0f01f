"""logits.py — the reference model's logits for the weights and tokens `zerobench crossval --logits`
wrote, so the C++ and Python models can be compared on the same inputs (tests/test_crossval.cpp).

  python logits.py --work DIR --dtypes fp32,bf16

Reads DIR/weights (HF Llama safetensors + config.json) and DIR/tokens.safetensors ("tokens",
[B, T] int64); for each dtype builds model.LlamaForCausalLM in it, loads the weights cast to
it, and writes DIR/logits_python_<dtype>.safetensors ("logits" [B, T, V] in that dtype). One
intra-op thread, as the C++ side uses; one process for every dtype (importing torch is slow).
A per-document batch (--batching pad|pack) carries "position_ids" and "document_ids" [B, T] too:
the model takes the position_ids (RoPE at the positions, the block-diagonal causal mask HF derives
from them), checked first to delimit exactly the documents zerobench's ids give.
"""
import argparse
import os

import torch
from safetensors.torch import load_file, save_file

import common
import model as zbmodel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--dtypes", required=True, help="comma-separated: fp32, bf16")
    a = p.parse_args()
    torch.set_num_threads(1)
    cfg = zbmodel.Config.from_hf_json(os.path.join(a.work, "weights", "config.json"))
    state = common.load_weights_file(a.work)
    inputs = load_file(os.path.join(a.work, "tokens.safetensors"))
    tokens, position_ids = inputs["tokens"], inputs.get("position_ids")
    if position_ids is not None:
        common.check_document_partition("tokens.safetensors", position_ids, inputs["document_ids"])
    for name in a.dtypes.split(","):
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[name]
        net = zbmodel.LlamaForCausalLM(cfg).to(dtype)
        zbmodel.load_weights(net, state)
        with torch.no_grad():
            logits = net.logits(tokens, position_ids)
        save_file({"logits": logits.contiguous()}, os.path.join(a.work, f"logits_python_{name}.safetensors"))


if __name__ == "__main__":
    main()
