"""Another name for :mod:`ptc.distributed.ft.native` (the same module object);
``python -m ptc.distributed.ft_native`` runs its ``main``.
"""

import sys

from ptc.distributed.ft import native as _module

if __name__ == "__main__":
    sys.exit(_module.main())
sys.modules[__name__] = _module
