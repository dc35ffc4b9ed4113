/* tests/abi/foreign_dlpack/v0_8/dlpack.h: stands in for another package's dlpack.h of an
 * incompatible DLPack version (only the include guard and the version macros matter: kffi's
 * headers must stop at their version check before reading any declaration). */
/* SPDX-License-Identifier: Apache-2.0 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define DLPACK_VERSION 80
#endif
