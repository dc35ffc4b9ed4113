// include/kffi/kffi.h: the whole C++ API in one include.
#ifndef KFFI_KFFI_H_
#define KFFI_KFFI_H_

#include <kffi/any.h>
#include <kffi/container/containers.h>
#include <kffi/dtype.h>
#include <kffi/env.h>
#include <kffi/error.h>
#include <kffi/function.h>
#include <kffi/module.h>
#include <kffi/object.h>
#include <kffi/optional.h>
#include <kffi/string.h>
#include <kffi/tensor.h>
#include <kffi/tensor_checks.h>
#include <kffi/variant.h>

#endif  // KFFI_KFFI_H_
