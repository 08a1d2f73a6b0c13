"""loopscale: how much is one recurrence worth? Iso-depth scaling laws for looped language models.

Code comments and docstrings cite the method as "method §X.Y": the section of docs/method.md (the paper,
Schwethelm, Rückert & Kaissis, arXiv 2604.21106, written out in the project's words, with the corrections
checked against the authors' released code and the verification targets).
"""

__version__ = "0.1.0"
