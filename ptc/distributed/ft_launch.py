"""Another name for :mod:`ptc.distributed.ft.launch` (the same module object)."""

import sys

from ptc.distributed.ft import launch as _module

sys.modules[__name__] = _module
