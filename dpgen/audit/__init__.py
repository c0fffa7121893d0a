"""Audits that run dpgen's real code paths, an application above the privacy library (like ``dpgen.tables``):
``canary`` (``make audit``: one step of every mechanism, canaries in the batch) and ``one_run`` (``make audit-run``:
whole training runs). Their statistics live in ``dpgen.privacy`` (``audit_stats``, ``one_run_bound``)."""
