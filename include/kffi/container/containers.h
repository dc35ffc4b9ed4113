// include/kffi/container/containers.h: every container, Optional and Variant in one include.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTAINER_CONTAINERS_H_
#define KFFI_CONTAINER_CONTAINERS_H_

#include <kffi/container/array.h>
#include <kffi/container/dict.h>
#include <kffi/container/list.h>
#include <kffi/container/map.h>
#include <kffi/container/shape.h>
#include <kffi/container/tuple.h>
#include <kffi/optional.h>
#include <kffi/variant.h>

#endif  // KFFI_CONTAINER_CONTAINERS_H_
