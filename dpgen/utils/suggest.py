"""Did-you-mean hints for a mistyped config key or group choice.

Two places need them: ``validate`` (a key added with ``+`` that no schema declares, e.g. ``+trainer.stepz``,
which Hydra's own error message suggests for a typo and which the dataclasses would otherwise ignore) and
the command line after Hydra refused an override (``trainer.stepz=1``, ``method=dpswdd``): Hydra names the
key but not the closest one that exists.
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf


def abbreviations(name: str) -> List[str]:
    """The short forms a user types for a name of several underscored words: ``fashion_mnist`` -> ``fmnist``
    (initials, then the last word) and ``fm`` (initials)."""
    parts = [p for p in name.split("_") if p]
    if len(parts) < 2:
        return []
    return ["".join(p[0] for p in parts[:-1]) + parts[-1], "".join(p[0] for p in parts)]


def closest(word: str, candidates: Iterable[str]) -> Optional[str]:
    """The candidate ``word`` abbreviates (``fmnist`` -> ``fashion_mnist``; when one only does), else the closest
    spelling (difflib; ``fmnist`` alone would give ``mnist``)."""
    candidates = list(candidates)
    short = [c for c in candidates if word in abbreviations(c)]
    if len(short) == 1:
        return short[0]
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    match = closest(word, candidates)
    return f": did you mean {match}?" if match else ""


def undeclared_keys(node: DictConfig, path: str = "") -> List[Tuple[str, List[str]]]:
    """(dotted key, the keys its schema declares there) for every key of a structured node that its
    dataclass does not declare (a key added with ``+``)."""
    found: List[Tuple[str, List[str]]] = []
    typ = OmegaConf.get_type(node)
    known = [f.name for f in dataclasses.fields(typ)] if dataclasses.is_dataclass(typ) else None
    for key in node.keys():
        if known is not None and key not in known:
            found.append((f"{path}{key}", [f"{path}{k}" for k in known]))
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            found += undeclared_keys(child, f"{path}{key}.")
    return found


def undeclared_key_error(cfg: DictConfig) -> Optional[str]:
    bad = undeclared_keys(cfg)
    if not bad:
        return None
    key, known = bad[0]
    return (f"unknown key {key}{_did_you_mean(key, known)} (a key added with + must be one the schema "
            f"declares; `python run.py --cfg job` lists them all)")


def _leaves(cfg, prefix: str = "") -> List[str]:
    out = []
    for key in cfg.keys():
        child = cfg._get_node(key)
        full = f"{prefix}{key}"
        out.append(full)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            out += _leaves(child, full + ".")
    return out


def override_hint(overrides: Sequence[str], config_dir: Path,
                  compose: Callable[[List[str]], DictConfig]) -> Optional[str]:
    """The closest known group choice or key for the first command-line override Hydra cannot apply;
    ``compose(group_choices)`` gives the config those choices select (the keys a typo is compared with)."""
    pairs = []
    for o in overrides:
        if o.startswith("-") or "=" not in o or o.startswith(("hydra", "~", "+")):
            continue
        key, value = o.split("=", 1)
        pairs.append((key.lstrip("+"), value))
    groups = {p.name for p in config_dir.iterdir() if p.is_dir()}
    choices_ok = []
    for key, value in pairs:
        if key in groups:
            options = sorted(p.stem for p in (config_dir / key).glob("*.yaml"))
            bad = [v for v in value.split(",") if v not in options and v != "null"]
            if bad:
                return (f"{key}={bad[0]} is not a choice of {key}/{_did_you_mean(bad[0], options)} "
                        f"(choices: {', '.join(options)})")
            choices_ok.append(f"{key}={value.split(',')[0]}")
    try:
        cfg = compose(choices_ok)
    except Exception:
        return None
    known = _leaves(cfg)
    for key, _ in pairs:
        if key not in groups and key not in known:
            return f"unknown key {key}{_did_you_mean(key, known)}"
    return None


__all__ = ["closest", "override_hint", "undeclared_key_error", "undeclared_keys"]
