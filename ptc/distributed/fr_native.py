"""Another name for :mod:`ptc.distributed.flight_recorder.native` (the same module object);
``python -m ptc.distributed.fr_native`` runs its ``main``.
"""

import sys

from ptc.distributed.flight_recorder import native as _module

if __name__ == "__main__":
    sys.exit(_module.main())
sys.modules[__name__] = _module
