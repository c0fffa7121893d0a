"""The Hydra config tree of dpgen, importable as ``dpgen.conf`` (``dpgen/conf`` links here) so the
installed package finds it too. YAML only; see docs/USAGE.md, section Running."""
