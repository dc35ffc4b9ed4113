/* tests/abi/foreign_dlpack/v1_2/dlpack.h: stands in for another package's dlpack.h of an
 * incompatible DLPack version (only the include guard and the version macros matter: kffi's
 * headers must stop at their version check before reading any declaration). */
/* SPDX-License-Identifier: Apache-2.0 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 2
#endif
