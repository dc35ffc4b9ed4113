// include/kffi/kffi.h: the whole C++ API in one include.
#ifndef KFFI_KFFI_H_
#define KFFI_KFFI_H_

#include <kffi/any.h>
#include <kffi/error.h>
#include <kffi/function.h>
#include <kffi/object.h>
#include <kffi/string.h>

#endif  // KFFI_KFFI_H_
