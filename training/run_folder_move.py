"""A run folder's own files, moved with it to another runs folder (`ortholab restore`, db/relocate.py): its
config.yaml names paths under the runs folder (the store's file in `db`, a `--runs_dir`, which a resume would go on
using), and its checkpoints name their folder (the checkpoint callbacks' `dirpath`, best and last files: Lightning
reloads the best value and files only where that path is the same string, so a resume elsewhere would forget its best
and keep a second best file). Both are rewritten to the new place, each written whole (never half), only where
something in it moves."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from ortholab.db.relocate import moved


def move_folder_files(folder: Path, roots: Mapping[str, str]) -> list[Path]:
    """Rewrite the paths under a runs folder of `roots` (old -> new) in `folder`'s config.yaml and checkpoints
    (checkpoints/*.ckpt); returns the files rewritten. A checkpoint torch cannot read without running code is left
    as it was copied (a resume from it says what is wrong with it)."""
    import torch

    from ortholab.training.callbacks.checkpoint_io import atomic_torch_save

    rewritten = []
    config = folder / "config.yaml"
    if config.is_file():
        held = yaml.safe_load(config.read_text())
        changed = moved(held, roots)
        if changed is not held:
            part = config.with_name(config.name + ".part")
            part.write_text(yaml.safe_dump(changed, sort_keys=False, allow_unicode=True))
            part.replace(config)
            rewritten.append(config)
    for path in sorted((folder / "checkpoints").glob("*.ckpt")):
        try:
            held = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # truncated, legacy, another kind of file: left as copied
            continue
        changed = moved(held, roots)
        if changed is not held:
            atomic_torch_save(changed, path)
            rewritten.append(path)
    return rewritten
