"""Another name for :mod:`ptc.demos.ft_example` (the same module object);
``python -m ptc.distributed.ft_example`` runs its ``main``.
"""

import sys

from ptc.demos import ft_example as _module

if __name__ == "__main__":
    raise SystemExit(_module.main())
sys.modules[__name__] = _module
