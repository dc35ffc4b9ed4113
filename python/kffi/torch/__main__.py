"""python/kffi/torch/__main__.py: ``python -m kffi.torch --cxxflags --ldflags`` prints the flags
of a C++ program that registers kffi ops with kffi::torch::RegisterOps (kffi.torch.cpp_flags())."""
# SPDX-License-Identifier: Apache-2.0

import sys

from ._deploy import main

sys.exit(main())
