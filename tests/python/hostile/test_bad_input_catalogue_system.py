"""tests/python/hostile/test_bad_input_catalogue_system.py: the bad-input catalogue, from Python:
the loader, malformed metadata in a library, kffi.compile's options (those refused before
compiling), containers, hostile __index__/__float__/__dlpack__ that mutate or raise, and deep
nesting.

As in test_bad_input_catalogue.py, every case in CASES names what it blames (the argument, the
path, the option, the function and module, the key). OTHER_CASES are errors of the callee itself
(a kernel's C++ exception, a callback's exception, the interpreter's recursion limit).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os

import kffi
import pytest
from bad_input_support import (  # noqa: F401  (fixtures)
    SIG,
    BadEq,
    DLPackRaisesUnprintable,
    DLPackReenters,
    MutatingDictIndex,
    MutatingIndex,
    RaisingFloat,
    RaisingIndex,
    as_param,
    bad_metadata_module_fixture,
    catalogue_module_fixture,
    check_case,
    env_fixture,
    fifo,
    libm_path,
    mutating_dict,
    mutating_list,
    nested_dict,
    nested_list,
    np,
    released,
    released_tensor,
    run_all,
    self_list,
    text_file,
    with_recursion_limit,
)

CASES = [
    # ---- the loader ---------------------------------------------------------------------------
    (
        "load_missing_file",
        lambda e: kffi.load_module(e.tmp / "missing.so"),
        FileNotFoundError,
        ["no such file", "missing.so"],
    ),
    (
        "load_directory",
        lambda e: kffi.load_module(e.tmp),
        RuntimeError,
        [f"Cannot load module `{os.sep}", "it is a directory, not a regular file"],
    ),
    (
        "load_fifo",
        lambda e: kffi.load_module(fifo(e.tmp)),
        RuntimeError,
        ["a_fifo`", "it is a FIFO (named pipe), not a regular file"],
    ),
    (
        "load_text_file",
        lambda e: kffi.load_module(text_file(e.tmp)),
        RuntimeError,
        ["libnot_a_library.so`: not a loadable shared library: not an ELF file"],
    ),
    (
        "load_nul_in_path",
        lambda e: kffi.load_module(str(e.tmp / "a\0b.so")),
        ValueError,
        ["contains a NUL byte"],
    ),
    (
        "load_plain_shared_library",
        lambda e: kffi.load_module(libm_path()),
        RuntimeError,
        ["it is not a kffi library", "__kffi__abi_version"],
    ),
    (
        "module_missing_function",
        lambda e: e.c["no_such_function"],
        KeyError,
        ["has no function 'no_such_function'", "takes_int"],
    ),
    (
        "module_missing_attribute",
        lambda e: e.c.no_such_function,
        AttributeError,
        ["no_such_function"],
    ),
    (
        "global_function_missing",
        lambda e: kffi.get_global_func("catalogue.no_such"),
        ValueError,
        ["Global function 'catalogue.no_such' is not registered"],
    ),
    # ---- malformed metadata in a library --------------------------------------------------------
    (
        "metadata_not_json",
        lambda e: e.bad.not_json,
        ValueError,
        [
            "Malformed metadata of function `not_json` in module `",
            "bad_metadata_kernels",
            "not valid JSON",
        ],
    ),
    (
        "metadata_not_object",
        lambda e: e.bad.not_object,
        ValueError,
        ["function `not_object`", "expected a JSON object, got list"],
    ),
    (
        "metadata_params_not_list",
        lambda e: e.bad.params_not_list,
        ValueError,
        ["function `params_not_list`", "`params` must be a list, got dict"],
    ),
    (
        "metadata_param_not_object",
        lambda e: e.bad.param_not_object,
        ValueError,
        ["function `param_not_object`", "params[0] must be an object, got int"],
    ),
    (
        "metadata_bad_param_name",
        lambda e: e.bad.bad_param_name,
        ValueError,
        ["function `bad_param_name`", "params[0] has name 'a b', expected a Python identifier"],
    ),
    (
        "metadata_keyword_param_name",
        lambda e: e.bad.keyword_param_name,
        ValueError,
        ["function `keyword_param_name`", "params[0] has name 'class'"],
    ),
    (
        "metadata_duplicate_param_name",
        lambda e: e.bad.duplicate_param_name,
        ValueError,
        ["function `duplicate_param_name`", "params[1] repeats the parameter name 'a'"],
    ),
    (
        "metadata_param_type_not_str",
        lambda e: e.bad.param_type_not_str,
        ValueError,
        ["function `param_type_not_str`", "params[0] (`a`) has type 3, expected a str"],
    ),
    (
        "metadata_doc_not_str",
        lambda e: e.bad.doc_not_str,
        ValueError,
        ["function `doc_not_str`", "`doc` must be a str, got int"],
    ),
    (
        "metadata_deeply_nested_json",
        lambda e: e.bad.deep_json,
        ValueError,
        ["function `deep_json`", "not valid JSON"],
    ),
    (
        "metadata_symbol_returns_int",
        lambda e: e.bad.meta_is_int,
        TypeError,
        ["The metadata symbol `__kffi__meta_meta_is_int` returned `int`, expected a str"],
    ),
    # ---- kffi.compile: options and fake arguments refused before compiling ---------------------
    (
        "compile_source_not_text",
        lambda e: kffi.compile(3, "f"),
        TypeError,
        ["kffi.compile: source is C++ text, got int"],
    ),
    (
        "compile_bad_name",
        lambda e: kffi.compile("", "1f"),
        ValueError,
        ["kffi.compile: name is a C++ identifier", "got '1f'"],
    ),
    (
        "compile_unknown_option",
        lambda e: kffi.compile("", "f", options={"opt_level": 3}),
        TypeError,
        ["kffi.compile: unknown options ['opt_level']", "extra_cflags"],
    ),
    (
        "compile_param_names_count",
        lambda e: kffi.compile("", "f", kffi.fake_tensor("float32", [4]), param_names=["a", "b"]),
        ValueError,
        ["kffi.compile: 2 param_names for 1 fake arguments"],
    ),
    (
        "compile_param_name_not_identifier",
        lambda e: kffi.compile("", "f", kffi.fake_tensor("float32", [4]), param_names=["a b"]),
        ValueError,
        ["parameter names are identifiers, got 'a b'"],
    ),
    (
        "compile_duplicate_param_names",
        lambda e: kffi.compile("", "f", 1, 2, param_names=["a", "a"]),
        ValueError,
        ["duplicate parameter names in ['a', 'a']"],
    ),
    (
        "compile_cflags_not_strings",
        lambda e: kffi.compile("void f() {}", "f", options={"extra_cflags": ["-O2", 3]}),
        TypeError,
        ["extra_cflags must be a str or a list of str, got int 3 at index 1"],
    ),
    (
        "compile_build_directory_int",
        lambda e: kffi.compile("void f() {}", "f", options={"build_directory": 3}),
        TypeError,
        ["build_directory must be a str or an os.PathLike, got int"],
    ),
    (
        "fake_tensor_bad_dtype",
        lambda e: kffi.fake_tensor("flot32", [4]),
        TypeError,
        ["kffi.fake_tensor: cannot read dtype 'flot32'"],
    ),
    (
        "fake_tensor_negative_dim",
        lambda e: kffi.fake_tensor("float32", [-4]),
        ValueError,
        ["kffi.fake_tensor: a dimension must be a non-negative int or a kffi.sym_int(), got -4"],
    ),
    (
        "fake_tensor_align_not_power_of_two",
        lambda e: kffi.fake_tensor("float32", [4], align=3),
        ValueError,
        ["kffi.fake_tensor: align is a power of two in bytes, got 3"],
    ),
    (
        "fake_tensor_bad_device",
        lambda e: kffi.fake_tensor("float32", [4], device="tpu"),
        ValueError,
        ["kffi.fake_tensor: device is 'cpu', 'cuda', 'any' or a tuple of them, got 'tpu'"],
    ),
    (
        "fake_tensor_bad_stride_order",
        lambda e: kffi.fake_tensor("float32", [4, 4], stride_order=(0, 0)),
        ValueError,
        ["kffi.fake_tensor: stride_order lists each dimension 0..1 once", "got (0, 0)"],
    ),
    (
        "fake_tensor_too_many_dims",
        lambda e: kffi.fake_tensor("float32", [1] * 33),
        ValueError,
        ["kffi.fake_tensor: 33 dimensions; a contract tensor has at most 32"],
    ),
    (
        "sym_int_bad_name",
        lambda e: kffi.sym_int("1n"),
        ValueError,
        ["kffi.sym_int: name must be an identifier, got '1n'"],
    ),
    (
        "sym_int_zero_divisibility",
        lambda e: kffi.sym_int("n", divisibility=0),
        ValueError,
        ["kffi.sym_int: divisibility must be an int >= 1, got 0"],
    ),
    (
        "int32_empty_range",
        lambda e: kffi.Int32.range(5, 1),
        ValueError,
        ["kffi.Int32.range: [5, 1] is empty"],
    ),
    # ---- containers ---------------------------------------------------------------------------
    (
        "array_index_out_of_range",
        lambda e: kffi.to_kffi([1, 2, 3])[5],
        IndexError,
        ["index out of range for a sequence of length 3"],
    ),
    ("map_missing_str_key", lambda e: kffi.to_kffi({"a": 1})["zz"], KeyError, ["zz"]),
    ("map_missing_int_key", lambda e: kffi.to_kffi({1: "a"})[2], KeyError, ["2"]),
    (
        "released_array_argument",
        lambda e: e.t.echo(released([1, 2])),
        ValueError,
        ["arg0: the Array object is null (destroyed) (argument #0 of `testing.echo`)"],
    ),
    (
        "released_tensor_argument",
        lambda e: e.c.takes_tensor(released_tensor()),
        ValueError,
        ["x: the Tensor object is null (destroyed) (argument #0 of `" + SIG["tensor"] + "`)"],
    ),
    # ---- hostile __index__ / __float__ / __dlpack__ -------------------------------------------
    (
        "index_raises",
        lambda e: e.c.takes_int(RaisingIndex()),
        ValueError,
        ["n: __index__ refused (argument #0 of `" + SIG["int"] + "`)"],
    ),
    (
        "index_mutates_its_list_and_raises",
        lambda e: e.c.takes_array(mutating_list()),
        ArithmeticError,
        ["xs: __index__ mutated its list (argument #0 of `" + SIG["array"] + "`)"],
    ),
    (
        "index_mutates_its_dict_and_raises",
        lambda e: e.c.takes_map(mutating_dict()),
        LookupError,
        ["m: __index__ emptied its dict (argument #0 of `" + SIG["map"] + "`)"],
    ),
    (
        "float_raises",
        lambda e: e.c.takes_float(RaisingFloat()),
        ArithmeticError,
        ["x: __float__ refused (argument #0 of `" + SIG["float"] + "`)"],
    ),
    (
        "float_raises_in_second_argument",
        lambda e: e.c.c_scalars(1, RaisingFloat(), True),
        ArithmeticError,
        ["s: __float__ refused (argument #1 of `c_scalars("],
    ),
    (
        "dlpack_raises_unprintable",
        lambda e: e.c.takes_tensor(DLPackRaisesUnprintable()),
        TypeError,
        [
            "x: cannot import the DLPackRaisesUnprintable as a tensor: <StrFails whose str() failed> (argument #0 of `"
            + SIG["tensor"]
            + "`)"
        ],
    ),
    (
        "index_in_tuple_raises",
        lambda e: e.c.takes_tuple((RaisingIndex(), "s")),
        ValueError,
        ["t: __index__ refused (argument #0 of `" + SIG["tuple"] + "`)"],
    ),
    # ---- deep nesting -------------------------------------------------------------------------
    (
        "list_nested_beyond_the_limit",
        lambda e: e.c.takes_array(nested_list(kffi.MAX_CONTAINER_DEPTH + 5)),
        RecursionError,
        ["xs: ", "while converting them for kffi (argument #0 of `" + SIG["array"] + "`)"],
    ),
    (
        "dict_nested_beyond_the_limit",
        lambda e: e.t.echo(nested_dict(kffi.MAX_CONTAINER_DEPTH + 5)),
        RecursionError,
        ["arg0: ", "while converting them for kffi (argument #0 of `testing.echo`)"],
    ),
    (
        "list_holding_itself",
        lambda e: e.c.takes_array(self_list()),
        RecursionError,
        ["xs: ", "(or hold themselves) while converting them for kffi (argument #0 of `"],
    ),
    (
        "list_nested_10000_deep_with_raised_limit",
        lambda e: with_recursion_limit(100_000, lambda: e.t.echo(nested_list(10_000))),
        RecursionError,
        [
            "arg0: containers or records nest deeper than kffi's limit of",
            "(argument #0 of `testing.echo`)",
        ],
    ),
]


# Errors that name no argument because none is at fault: the callee's own (a kernel's C++
# exception, a callback's exception), the interpreter's recursion limit, a lookup's key.
OTHER_CASES = [
    ("function_that_raises", lambda e: e.c.takes_function(lambda x: {}[x]), KeyError, ["1"]),
    (
        "dlpack_reenters_until_recursion_limit",
        lambda e: e.c.takes_tensor(DLPackReenters(e.c.takes_tensor)),
        RecursionError,
        ["maximum recursion depth"],
    ),
    (
        "callback_returns_deep_list",
        lambda e: e.c.takes_function(lambda x: nested_list(10_000)),
        RecursionError,
        ["while converting them for kffi"],
    ),
    (
        "map_key_with_raising_eq",
        lambda e: kffi.to_kffi({(1,): 1})[BadEq()],
        TypeError,
        ["BadEq.__eq__ refused"],
    ),
    (
        "kernel_std_runtime_error",
        lambda e: e.c.throws_std("runtime"),
        RuntimeError,
        ["the kernel's runtime_error text"],
    ),
    (
        "kernel_std_invalid_argument",
        lambda e: e.c.throws_std("invalid"),
        ValueError,
        ["the kernel's invalid_argument text"],
    ),
    (
        "kernel_std_out_of_range",
        lambda e: e.c.throws_std("range"),
        IndexError,
        ["the kernel's out_of_range text"],
    ),
    ("kernel_std_bad_alloc", lambda e: e.c.throws_std("alloc"), MemoryError, ["Out of memory"]),
    ("load_int_path", lambda e: kffi.load_module(3), TypeError, ["int"]),
]


@pytest.mark.parametrize("action,exc_type,fragments", [as_param(c) for c in CASES + OTHER_CASES])
def test_bad_input(env, action, exc_type, fragments):
    check_case(env, action, exc_type, fragments)


def test_process_is_healthy_after_the_catalogue(env):
    run_all(env, CASES + OTHER_CASES)
    assert env.c.takes_int(41) == 41
    assert env.bad.fine(7) == 7
    x = np.zeros(3, np.float32)
    env.k.fill(x, 2.0)
    assert x.tolist() == [2.0, 2.0, 2.0]


def test_kernel_runtime_error_arrives_as_runtime_error_with_its_what_text(env):
    # A kernel body that throws std::runtime_error: the what() text is the message, whole.
    with pytest.raises(RuntimeError) as info:
        env.c.throws_std("runtime")
    assert type(info.value) is RuntimeError
    assert str(info.value) == "the kernel's runtime_error text"
    # And the C++ side of a callback sees the same kind and text.
    assert list(env.t.catch_error(env.c.throws_std, "runtime")) == [
        "RuntimeError",
        "the kernel's runtime_error text",
    ]


def test_unknown_cpp_exception_arrives_as_kffi_error(env):
    with pytest.raises(kffi.Error) as info:
        env.c.throws_std("other")
    assert "unknown C++ exception" in str(info.value)
