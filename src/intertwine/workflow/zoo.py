"""The model zoo: save and load checkpoints, packs of members trained together, and the zoo table.
(A member trains in ``intertwine.workflow.stages.zoo.job.train_member``, a pack in ``train_pack``.)"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import torch

from intertwine import models
from intertwine.utils import DivergedError, atomic_path, current_umask, named_write_failures

CHECKPOINT_FORMAT = "intertwine-checkpoint/1"


def refuse_overwrite(path: str | Path) -> None:
    if Path(path).exists():
        raise FileExistsError(
            f"{path} exists; a trained checkpoint is never overwritten. "
            "Delete it (chmod u+w first: the workflow write-protects it) to retrain."
        )


def save_checkpoint(checkpoint: dict, path: str | Path) -> None:
    """Write atomically; an existing checkpoint is never overwritten (delete it to retrain); a full
    disk is an error that says so."""
    refuse_overwrite(path)
    with atomic_path(path) as tmp, named_write_failures(path):
        torch.save(checkpoint, tmp)


def save_member(checkpoint: dict, metrics: pd.DataFrame, path: str | Path, metrics_path: str | Path) -> None:
    """A member's checkpoint and its metrics table, written together: both files or neither (a
    write that fails, on a full disk say, leaves no metrics without their checkpoint)."""
    from intertwine.workflow.stages.zoo.tables import ZOO_EPOCHS
    from intertwine.workflow.tables import write_parquet

    refuse_overwrite(path)
    with atomic_path(metrics_path) as metrics_tmp, atomic_path(path) as tmp:
        with named_write_failures(metrics_path):
            write_parquet(metrics, metrics_tmp, ZOO_EPOCHS)
        with named_write_failures(path):
            torch.save(checkpoint, tmp)


def data_fingerprint(meta: dict) -> dict:
    """The identity of a data cache, from its metadata (``data.load_meta``): the data set's name,
    image size, split sizes and a hash of those with its classes, its config hash and its
    training set's per-channel mean and std (float64 sums over every training pixel, so two
    caches drawn from other seeds or sources differ there). A checkpoint records the fingerprint
    of the data it was trained on (``checkpoint["data"]``); jobs compare it with their own."""
    identity = {
        "dataset": meta.get("dataset"),
        "image_size": list(meta.get("image_size", [])),
        "sizes": dict(meta.get("sizes", {})),
    }
    hashed = identity | {key: meta.get(key) for key in ("classes", "config_hash", "mean", "std")}
    digest = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:16]
    return identity | {"hash": digest}


def fingerprint_text(fingerprint: dict) -> str:
    size = "x".join(map(str, fingerprint.get("image_size", [])))
    sizes = ", ".join(f"{split} {n}" for split, n in fingerprint.get("sizes", {}).items())
    return f"{fingerprint.get('dataset')} at {size} ({sizes}; hash {fingerprint.get('hash')})"


def check_data(checkpoint: dict, path: str | Path, meta: dict, data_dir: str | Path) -> str | None:
    """Whether the checkpoint at ``path`` was trained on the data cache ``data_dir`` (its
    metadata ``meta``): a ValueError naming both when its recorded fingerprint differs; for a
    checkpoint that records none (trained before checkpoints did), a warning to log (returned),
    and the checkpoint is used unchecked."""
    recorded = checkpoint.get("data")
    if recorded is None:
        return (
            f"warning: {path} records no data fingerprint (trained before checkpoints recorded one), so "
            f"whether it was trained on {data_dir} ({fingerprint_text(data_fingerprint(meta))}) is not "
            "checked; retrain it to have it checked"
        )
    ours = data_fingerprint(meta)
    if recorded != ours:
        raise ValueError(
            f"{path} was trained on {fingerprint_text(recorded)}, but this job's data cache {data_dir} "
            f"holds {fingerprint_text(ours)}: its rows would describe another data set. Give the job "
            "the data cache the member was trained on (--data), or retrain the member on this one"
        )
    return None


# What every checkpoint holds (``jobs.zoo.train_member`` writes more).
CHECKPOINT_KEYS = ("format", "variant", "spec", "seed", "state_dict")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read; the message names it and says how to recover."""


def _recover(path: str | Path) -> str:
    pack = pack_of(path)
    if pack is not None:
        return repair_pack(pack, path)
    return (
        f"Delete it (rm -f {path}: the workflow write-protects checkpoints) and rerun its job: snakemake "
        "retrains that member (train_member), and every job that read it reruns after"
    )


def pack_of(path: str | Path) -> Path | None:
    """The pack directory that ``path`` belongs to: the pack itself for a file in one
    (``.../packs/<pack>/seed<s>.pt``), or for a member's checkpoint the pack holding a hard link
    to the same file (``<zoo>/packs/*/<name>``); None for a checkpoint of its own."""
    path = Path(path)
    if path.parent.parent.name == "packs":
        return path.parent
    try:
        if path.stat().st_nlink < 2:
            return None
        for candidate in sorted((path.parent / "packs").glob(f"*/{path.name}")):
            if os.path.samefile(candidate, path):
                return candidate.parent
    except OSError:
        return None
    return None


def repair_pack(pack: str | Path, path: str | Path) -> str:
    """How to recover from a damaged file of a pack: every member's checkpoint is a hard link
    into the pack, so deleting one alone would link the same damaged file again; the pack and
    the links of all its members go, and the pack is retrained."""
    pack = Path(pack)
    zoo = pack.parent.parent
    seeds = sorted(
        {int(f.name[4:].split(".")[0]) for f in pack.glob("seed*") if f.name[4:].split(".")[0].isdigit()}
    )
    members = [str(zoo / f"seed{seed}{suffix}") for seed in seeds for suffix in (".pt", ".metrics.parquet")]
    return (
        f"It is a file of the pack {pack} (each member's checkpoint is a hard link into it, so deleting "
        f"{Path(path).name} alone would link the same damaged file again). Delete the pack and its "
        f"members' checkpoints and metrics (chmod -R u+w {pack} && rm -rf {pack} {' '.join(members)}) "
        "and rerun: snakemake retrains the pack (train_pack), and every job that read its members reruns after"
    )


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """A checkpoint's contents, loaded with torch's weights-only unpickler. A file that is not one
    (truncated by an interrupted copy or a full disk, or another kind of file) is a
    ``CheckpointError`` naming it and saying how to recover; a missing one a FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint; train it first (snakemake {path})")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises OSError, RuntimeError, EOFError, KeyError, ...
        if isinstance(err, pickle.UnpicklingError) and "weights_only" in str(err):
            what = (
                "it holds Python objects that are neither tensors nor plain data, which a checkpoint "
                "never does, so it is not loaded"
            )
        else:
            what = (
                f"it is truncated or damaged ({type(err).__name__}: "
                f"{(str(err).splitlines() or [''])[0][:120]})"
            )
        raise CheckpointError(
            f"{path} is not a readable intertwine checkpoint: {what}. {_recover(path)}"
        ) from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} is not an intertwine checkpoint ({CHECKPOINT_FORMAT}: a dict with "
            f"format {CHECKPOINT_FORMAT!r}). {_recover(path)}"
        )
    missing = [key for key in CHECKPOINT_KEYS if key not in checkpoint]
    if missing or not isinstance(checkpoint["state_dict"], dict):
        raise CheckpointError(
            f"{path} is an incomplete checkpoint (it lacks {missing or ['a state_dict']}). {_recover(path)}"
        )
    return checkpoint


def load_weights(model: torch.nn.Module, path: str | Path, spec: dict | None = None) -> dict:
    """Load a checkpoint's weights into ``model``; a different architecture is an error naming both."""
    checkpoint = read_checkpoint(path, models.model_device(model, f"load_weights({path})"))
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as err:
        wanted = spec or type(model).__name__
        raise ValueError(
            f"{path} holds a {checkpoint['spec']} (variant {checkpoint['variant']!r}) "
            f"but it is being loaded into a {wanted}: the architectures differ "
            f"({str(err).splitlines()[0]})"
        ) from err
    return checkpoint


def recorded_test_acc(meta: dict) -> float | None:
    """The member's test accuracy from its checkpoint when it was evaluated in float32, as every
    later stage evaluates (then re-evaluating would give the same number); None otherwise, e.g.
    for a zoo evaluated under bf16 autocast or a checkpoint that predates the record."""
    return meta["test_acc"] if meta.get("test_dtype") == "float32" else None


def load_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, dict]:
    """Rebuild a zoo member from its checkpoint: ``(model in eval mode, checkpoint metadata)``."""
    checkpoint = read_checkpoint(path, device)
    try:
        model = models.build(checkpoint["spec"]).to(device)
        model.load_state_dict(checkpoint.pop("state_dict"))
    except (TypeError, ValueError, RuntimeError) as err:  # a spec or weights that do not fit
        raise CheckpointError(
            f"{path} holds weights that do not fit its own spec {checkpoint['spec']} "
            f"({(str(err).splitlines() or [''])[0][:200]}). {_recover(path)}"
        ) from None
    return model.eval(), checkpoint


# A pack directory (``results/zoo/<variant>/packs/seeds<first>-<last>``) holds, per member,
# ``seed<s>.pt`` and ``seed<s>.metrics.parquet``, or ``seed<s>.diverged`` with the error that
# stopped it. The member's own checkpoint path is a hard link to its file there (``unpack_member``).


def pack_files(pack: str | Path, seed: int) -> tuple[Path, Path, Path]:
    """A member's checkpoint, metrics and divergence note in its pack directory."""
    pack = Path(pack)
    return pack / f"seed{seed}.pt", pack / f"seed{seed}.metrics.parquet", pack / f"seed{seed}.diverged"


def write_pack(pack: str | Path, members: dict[int, tuple[dict, pd.DataFrame] | DivergedError]) -> None:
    """Write a trained pack at once: built in a hidden directory beside it and renamed into place,
    so a killed job leaves no half pack; an existing pack is never replaced (its members'
    checkpoints are links to its files)."""
    from intertwine.workflow.stages.zoo.tables import ZOO_EPOCHS
    from intertwine.workflow.tables import write_parquet

    pack = Path(pack)
    if pack.exists() and any(pack.iterdir()):
        raise FileExistsError(
            f"{pack} exists; a trained pack is never overwritten. Delete it and its members' "
            "checkpoints (chmod -R u+w first: the workflow write-protects them) to retrain"
        )
    pack.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=pack.parent, prefix=f".{pack.name}.", suffix=".tmp"))
    try:
        for seed, member in members.items():
            checkpoint_path, metrics_path, diverged_path = pack_files(building, seed)
            if isinstance(member, DivergedError):
                diverged_path.write_text(f"{member}\n")
                continue
            checkpoint, metrics = member
            # errors name the pack's file (the hidden directory is removed below)
            with named_write_failures(pack_files(pack, seed)[0]):
                torch.save(checkpoint, checkpoint_path)
            with named_write_failures(pack_files(pack, seed)[1]):
                write_parquet(metrics, metrics_path, ZOO_EPOCHS)
        building.chmod(0o777 & ~current_umask())  # mkdtemp makes 0700 directories
        if pack.exists():  # an empty directory, e.g. made by the workflow manager
            pack.rmdir()
        os.rename(building, pack)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def unpack_member(pack: str | Path, seed: int, checkpoint_out: str | Path, metrics_out: str | Path) -> None:
    """Give a member of a trained pack its own paths: hard links to its files (copies where the
    file system has no links). A member that diverged in the pack is its ``DivergedError``. The
    files are read before they are linked: a damaged one is a ``CheckpointError`` that says to
    delete the pack and its members' links (``repair_pack``), never a link to the damage."""
    from intertwine.workflow.stages.zoo.tables import ZOO_EPOCHS
    from intertwine.workflow.tables import read_parquet

    checkpoint_path, metrics_path, diverged_path = pack_files(pack, seed)
    if diverged_path.exists():
        raise DivergedError(f"{diverged_path.read_text().strip()} (the rest of its pack, {pack}, is kept)")
    if not checkpoint_path.exists():
        raise FileNotFoundError(
            f"{pack} holds no member seed {seed}; delete the pack and its members' checkpoints to retrain it"
        )
    refuse_overwrite(checkpoint_out)
    checkpoint = read_checkpoint(checkpoint_path)  # a damaged file's error says how to repair the pack
    if checkpoint["seed"] != seed:
        raise CheckpointError(
            f"{checkpoint_path} holds seed {checkpoint['seed']}, not {seed}. {repair_pack(pack, checkpoint_path)}"
        )
    try:
        read_parquet([metrics_path], ZOO_EPOCHS)
    except Exception as err:  # noqa: BLE001 - pyarrow raises many kinds for a damaged file
        raise CheckpointError(
            f"{metrics_path} is not a readable metrics table ({type(err).__name__}: "
            f"{(str(err).splitlines() or [''])[0][:120]}). {repair_pack(pack, metrics_path)}"
        ) from None
    for source, out in ((metrics_path, metrics_out), (checkpoint_path, checkpoint_out)):
        with atomic_path(out) as tmp:
            tmp.unlink()
            try:
                os.link(source, tmp)
            except OSError:
                shutil.copyfile(source, tmp)


# --- members taken from existing checkpoints (zoo.checkpoints) ---------------------------------

#: The files of a checkpoint folder that are members (by suffix).
FOREIGN_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin")

#: Keys under which a training loop's checkpoint holds the model's state dict.
STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model")


def checkpoint_files(folder: str | Path) -> list[Path]:
    """The member files of a checkpoint folder (``FOREIGN_SUFFIXES``), sorted by name: member s is
    the s-th."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in FOREIGN_SUFFIXES)


def foreign_state_dict(path: str | Path, whole_modules: bool, key: str) -> dict[str, torch.Tensor]:
    """The weights a checkpoint file trained elsewhere holds, in one of four formats: an intertwine
    checkpoint; a state dict (parameter and buffer names -> tensors); a mapping holding one under
    ``state_dict``, ``model_state_dict`` or ``model`` (training loops' checkpoints, Lightning's);
    or, with ``whole_modules``, a whole module saved by ``torch.save(model)``. A DataParallel
    ``module.`` prefix on every name is dropped. ``key`` is the config key that names the folder,
    for the errors (a CheckpointError naming the file)."""
    path = Path(path)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if not whole_modules:
            raise CheckpointError(
                f"{path} holds Python objects beyond tensors and plain data (a whole saved module, or "
                f"objects of a training loop), which are not unpickled unless you trust the file: it may "
                f"run code. Save its state_dict() instead, or set {key}.whole_modules: true "
                f"({str(err).splitlines()[0][:120]})"
            ) from None
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as inner:  # noqa: BLE001 - unpickling raises anything the pickle's code raises
            raise CheckpointError(
                f"{path} cannot be unpickled ({type(inner).__name__}: {str(inner)[:200]}); a whole saved "
                "module needs its class importable (on PYTHONPATH) under the name it was saved with"
            ) from None
    except Exception as err:  # noqa: BLE001 - torch raises OSError, RuntimeError, EOFError, ...
        raise CheckpointError(
            f"{path} is not a readable torch file ({type(err).__name__}: "
            f"{(str(err).splitlines() or [''])[0][:120]}); copy it again, or remove it from the folder {key}"
        ) from None
    if isinstance(loaded, torch.nn.Module):
        state = loaded.state_dict()
    elif isinstance(loaded, dict) and loaded.get("format") == CHECKPOINT_FORMAT:
        state = loaded.get("state_dict")
    elif isinstance(loaded, dict) and any(isinstance(loaded.get(k), dict) for k in STATE_DICT_KEYS):
        state = next(loaded[k] for k in STATE_DICT_KEYS if isinstance(loaded.get(k), dict))
    else:
        state = loaded
    if (
        not isinstance(state, dict)
        or not state
        or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())
    ):
        shown = list(loaded)[:8] if isinstance(loaded, dict) else type(loaded).__name__
        raise CheckpointError(
            f"{path} holds no state dict (names -> tensors) where one is looked for: at the top, under "
            f"{', '.join(STATE_DICT_KEYS)}, or as a whole module; it holds {shown}. Save "
            "model.state_dict() with torch.save"
        )
    if all(name.startswith("module.") for name in state):
        state = {name.removeprefix("module."): tensor for name, tensor in state.items()}
    return state


def fit_weights(model: torch.nn.Module, state: dict, path: str | Path, what: str) -> None:
    """Load ``state`` into ``model`` exactly; a checkpoint that does not fit ``what`` (the variant
    and its spec) is a ValueError naming the file and the first keys that differ: missing, not
    the model's, or of another shape."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [
        f"{k}: {tuple(state[k].shape)} in the file, {tuple(own[k].shape)} in the model"
        for k in own
        if k in state and state[k].shape != own[k].shape
    ]
    problems = [
        f"{label} {items[:5]}{' ...' if len(items) > 5 else ''}"
        for label, items in (
            ("missing keys", missing),
            ("keys not in the model", unexpected),
            ("other shapes", shapes),
        )
        if items
    ]
    if problems:
        raise ValueError(
            f"{path} does not fit {what}: {'; '.join(problems)}. Point the variant's spec at the "
            "architecture these weights were trained with (its factory, options and num_classes), or "
            "remove the file from the folder"
        )
    model.load_state_dict(state)
