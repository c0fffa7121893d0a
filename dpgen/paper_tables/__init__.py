"""The four papers' tables as CSV (``#`` lines are comments): package data, read with
:func:`dpgen.utils.paper.read_paper_table`. Copies of ``../shared/paper-tables/``; a test checks
they stay equal where that folder exists."""
