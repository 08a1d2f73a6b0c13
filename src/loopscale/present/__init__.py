"""Every sentence loopscale writes about a result, in one place (issue 42).

``fit/`` returns typed records (``fit.results``) holding numbers and codes; the functions here turn them
into the words a user reads: one interval writer and one p-value writer (``numbers``), one function per
sentence (``law_check``: the law check's headline, its evidence, its power), and the text report of a fit
(``fit_text``). The report (``loopscale.report``) and the CLI lay these out; neither writes its own.
"""
