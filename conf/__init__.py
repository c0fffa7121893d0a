"""The Hydra config tree of dpgen, importable as ``dpgen.conf`` (``dpgen/conf`` links here) so the
installed package finds it too. YAML only; see README.md, section Running."""
