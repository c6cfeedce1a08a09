"""Put the weights of the official R-Transformer music model into an OrthoLab checkpoint, to evaluate them here.

    python tools/official_rtransformer_weights.py OFFICIAL.pt TEMPLATE.ckpt OUT.ckpt
    ortholab test --config RUN/config.yaml --ckpt_path OUT.ckpt

OFFICIAL.pt: a state_dict of DSE-MSU/R-transformer's audio/model.py `RT` saved with torch.save (GRU, LSTM or RNN
cells). TEMPLATE.ckpt: a checkpoint of an OrthoLab run of the same sizes
(configs/papers/rtransformer_srnn_nottingham.yaml with that cell); only its state_dict is replaced. The official
model's unused modules (each LocalRNN's `output`, RTransformer's `norm` and `feed_forward`, which its forward
never calls) are left out.
"""

from __future__ import annotations

import argparse
import pickle
import re
import sys
from pathlib import Path

import torch

CELL_TENSORS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
UNUSED = re.compile(r"^rt\.(norm|feed_forward)\.|\.local_rnn\.output\.")


def ortholab_state_dict(official: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The official RT's tensors under the names of OrthoLab's music module (SequenceModel(RTransformer) as `model`)."""
    levels = sorted({int(m[1]) for key in official if (m := re.match(r"rt\.forward_net\.(\d+)\.", key))})
    out = {
        "model.layer.encoder.weight": official["encoder.weight"],
        "model.layer.encoder.bias": official["encoder.bias"],
        "model.readout.weight": official["linear.weight"],
        "model.readout.bias": official["linear.bias"],
    }
    used = {"encoder.weight", "encoder.bias", "linear.weight", "linear.bias"}
    for level in levels:
        block, ours = f"rt.forward_net.{level}.", f"model.layer.levels.{level}."
        local_layers = sorted(
            {int(m[1]) for key in official if (m := re.match(re.escape(block) + r"layers\.(\d+)\.", key))}
        )
        names = {}
        for i in local_layers:  # Block.layers[i]: LocalRNN inside a SublayerConnection
            names[f"{ours}{i}.norm.weight"] = f"{block}layers.{i}.connection.norm.a_2"
            names[f"{ours}{i}.norm.bias"] = f"{block}layers.{i}.connection.norm.b_2"
            for tensor in CELL_TENSORS:
                names[f"{ours}{i}.sublayer.cell.rnn.{tensor}"] = f"{block}layers.{i}.local_rnn.rnn.{tensor}"
        attention, feed_forward = len(local_layers), len(local_layers) + 1
        for position, norm in ((attention, "connections.0"), (feed_forward, "connections.1")):
            names[f"{ours}{position}.norm.weight"] = f"{block}{norm}.norm.a_2"
            names[f"{ours}{position}.norm.bias"] = f"{block}{norm}.norm.b_2"
        names[f"{ours}{attention}.sublayer.attention.out_proj.weight"] = f"{block}pooling.linears.3.weight"
        names[f"{ours}{attention}.sublayer.attention.out_proj.bias"] = f"{block}pooling.linears.3.bias"
        for k, linear in ((0, "w_1"), (3, "w_2")):
            names[f"{ours}{feed_forward}.sublayer.{k}.weight"] = f"{block}feed_forward.{linear}.weight"
            names[f"{ours}{feed_forward}.sublayer.{k}.bias"] = f"{block}feed_forward.{linear}.bias"
        out.update({name: official[source] for name, source in names.items()})
        used |= set(names.values())
        for kind in ("weight", "bias"):  # MHPooling's query, key and value linears are one stacked in_proj
            stacked = [f"{block}pooling.linears.{j}.{kind}" for j in range(3)]
            out[f"{ours}{attention}.sublayer.attention.in_proj_{kind}"] = torch.cat([official[s] for s in stacked])
            used |= set(stacked)
    left = sorted(key for key in set(official) - used if not UNUSED.search(key))
    if left:
        raise KeyError(f"official tensors with no place in OrthoLab's R-Transformer: {left}")
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="python tools/official_rtransformer_weights.py",
        description=__doc__.split("\n\n")[0],
        epilog="Then: ortholab test --config RUN/config.yaml --ckpt_path OUT.ckpt",
    )
    parser.add_argument("official", type=Path, help="a state_dict of the official RT (torch.save)")
    parser.add_argument("template", type=Path, help="a checkpoint of an OrthoLab run of the same sizes and cell")
    parser.add_argument("out", type=Path, help="where to write the checkpoint holding the official weights")
    args = parser.parse_args(argv)
    if not args.out.parent.is_dir():
        parser.error(f"out {args.out}: its folder {args.out.parent} does not exist")
    loaded = {}
    for name in ("official", "template"):
        path = getattr(args, name)
        if not path.is_file():
            parser.error(f"{name} {path}: no such file")
        try:  # tensors and plain containers only: a crafted file cannot run code
            loaded[name] = torch.load(path, map_location="cpu", weights_only=True)
        except (RuntimeError, OSError, pickle.UnpicklingError, EOFError) as err:
            parser.error(f"{name} {path}: cannot be read with torch.load ({' '.join(str(err).split())[:160]})")
    official, checkpoint = loaded["official"], loaded["template"]
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        parser.error(f"template {args.template}: not a checkpoint of an OrthoLab run (no state_dict)")
    if not isinstance(official, dict) or not all(isinstance(v, torch.Tensor) for v in official.values()):
        parser.error(f"official {args.official}: not a state_dict (a mapping of names to tensors)")
    try:
        converted = ortholab_state_dict(official)
    except KeyError as err:
        parser.error(f"official {args.official} is not a state_dict of the official RT ({str(err)[:200]})")
    expected = checkpoint["state_dict"]
    if set(converted) != set(expected) or any(converted[k].shape != expected[k].shape for k in converted):
        wrong = sorted(set(converted) ^ set(expected)) or [
            k for k in converted if converted[k].shape != expected[k].shape
        ]
        parser.error(f"{args.official} does not fit {args.template} (a run of other sizes or cell?): {wrong[:6]}")
    checkpoint["state_dict"] = converted
    torch.save(checkpoint, args.out)
    print(f"wrote {args.out}: {args.official}'s weights in {args.template}'s run")


if __name__ == "__main__":
    main(sys.argv[1:])
