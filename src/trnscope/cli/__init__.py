"""The ``trnscope`` command."""
