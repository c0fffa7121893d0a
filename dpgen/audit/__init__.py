"""Audits that run dpgen's real training: ``one_run`` (``make audit-run``). The one-step mechanism audit
(``make audit``) is ``dpgen.privacy.audit``; the statistics of both live in ``dpgen.privacy``."""
