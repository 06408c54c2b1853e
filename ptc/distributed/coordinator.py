"""Another name for :mod:`ptc.distributed.ft.coordinator` (the same module object);
``python -m ptc.distributed.coordinator`` runs its ``main``.
"""

import sys

from ptc.distributed.ft import coordinator as _module

if __name__ == "__main__":
    sys.exit(_module.main())
sys.modules[__name__] = _module
