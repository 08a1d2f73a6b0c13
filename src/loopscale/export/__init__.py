"""Export a run to a self-contained Hugging Face folder (``loopscale export``, docs/export.md).

``hf.export_run(run, out)`` writes the folder; ``configuration_loopscale.py`` and ``modeling_loopscale.py``
are the two files copied into it (they import only torch and transformers, never loopscale, and are
imported here only by tests). Importing this package loads neither torch nor transformers.
"""

from loopscale.export.hf import MODEL_TYPE, check_export, export_run

__all__ = ["MODEL_TYPE", "check_export", "export_run"]
