"""save -> load -> compare on every zoo case."""

from __future__ import annotations

import functools
import io

import pytest
import torch

import serde
from serde.testing import assert_programs_equal, assert_roundtrip, zoo


@functools.cache
def exported(name: str):
    return zoo.export_case(zoo.get(name))


@pytest.mark.parametrize("name", [c.name for c in zoo.CASES])
def test_zoo_roundtrip(name, tmp_path):
    ep = exported(name)
    path = tmp_path / f"{name}.pt2s"
    serde.save(ep, path, debug_info=True)
    loaded = serde.load(path)
    assert_programs_equal(ep, loaded, metadata=("nn_module_stack", "source_fn_stack", "torch_fn", "custom",
                                                "stack_trace", "module_types"))
    for args, kwargs in zoo.get(name).other_inputs():
        assert_programs_equal(ep, loaded, inputs=(args, kwargs))


def test_save_to_file_object_and_load_from_bytes():
    ep = exported("mlp")
    buf = io.BytesIO()
    serde.save(ep, buf)
    assert_programs_equal(ep, serde.load(buf.getvalue()))
    buf.seek(0)
    assert_programs_equal(ep, serde.load(buf))


def test_dynamic_shapes_and_range_constraints_come_back_exactly():
    ep = exported("dynamic_arith")
    loaded = assert_roundtrip(ep)
    def ranges(e):
        return sorted((int(v.lower), str(v.upper)) for v in e.range_constraints.values())
    assert ranges(loaded) == ranges(ep)
    shapes = [str(n.meta["val"].shape) for e in (ep, loaded) for n in e.graph.nodes if n.name == "x"]
    assert shapes[0].replace(str(next(iter(ep.range_constraints)).free_symbols.pop()), "S") == \
        shapes[1].replace(str(next(iter(loaded.range_constraints)).free_symbols.pop()), "S")
    # the SymInt output (x.shape[0] * 3 + 1) is computed from the new size
    out = loaded.module()(torch.randn(10, 8), torch.randn(20, 8))
    assert out[2] == 31
    with pytest.raises(Exception, match="Expected input|range|constraint|must be|Guard"):
        loaded.module()(torch.randn(200, 8), torch.randn(400, 8))  # outside Dim("d", max=64)


def test_signature_kinds_are_all_present():
    seen_in, seen_out = set(), set()
    for name in ("signature_kinds", "signature_kinds_aten", "input_mutation_aten"):
        loaded = assert_roundtrip(exported(name))
        for s in loaded.graph_signature.input_specs:
            kind = s.kind.name
            if kind == "BUFFER":
                kind += "_persistent" if s.persistent else "_nonpersistent"
            if kind == "USER_INPUT":
                kind += "_constant" if type(s.arg).__name__ == "ConstantArgument" else "_tensor"
            seen_in.add(kind)
        seen_out.update(s.kind.name for s in loaded.graph_signature.output_specs)
    assert {"PARAMETER", "BUFFER_persistent", "BUFFER_nonpersistent", "CONSTANT_TENSOR",
            "USER_INPUT_constant", "USER_INPUT_tensor"} <= seen_in
    assert {"USER_OUTPUT", "BUFFER_MUTATION", "USER_INPUT_MUTATION"} <= seen_out


def test_unflatten_works_and_matches():
    ep = exported("nested_modules")
    loaded = assert_roundtrip(ep)
    x = torch.randn(4, 8)
    u1, u2 = torch.export.unflatten(ep), torch.export.unflatten(loaded)
    torch.testing.assert_close(u1(x), u2(x))
    assert [n for n, _ in u1.named_modules()] == [n for n, _ in u2.named_modules()]
    torch.testing.assert_close(getattr(u2.b, "2")(x), getattr(u1.b, "2")(x))


def test_metadata_preserved():
    loaded = assert_roundtrip(exported("annotated"))
    customs = [n.meta.get("custom") for n in loaded.graph.nodes if n.meta.get("custom")]
    assert {"stage": "encoder", "tags": [1, 2], "ok": True} in customs
    assert loaded.graph_module.meta["custom"] == {"owner": "zoo", "version": 3}
    lin = [n for n in loaded.graph.nodes if n.op == "call_function" and "linear" in str(n.target)][0]
    assert lin.meta["nn_module_stack"] and lin.meta["torch_fn"] and lin.meta["stack_trace"]


def test_tied_weights_share_storage_after_load():
    ep = exported("tied_weights")
    loaded = assert_roundtrip(ep)
    sd = loaded.state_dict
    assert sd["head.weight"].untyped_storage().data_ptr() == sd["embed.weight"].untyped_storage().data_ptr()
    m = loaded.module()
    assert m.head.weight.data_ptr() == m.embed.weight.data_ptr()


class _TiedLinears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4, bias=False)
        self.b = torch.nn.Linear(4, 4, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


@pytest.mark.parametrize("strict", [False, True])
def test_every_name_of_a_tied_parameter_is_that_parameter_after_load(strict):
    """A strict export lists only the first name of tied weights in its signature; the second stays
    in the state dict, a Parameter, and unflatten makes it a parameter of the module, not a buffer."""
    ep = torch.export.export(_TiedLinears(), (torch.randn(2, 4),), strict=strict)
    buf = io.BytesIO()
    serde.save(ep, buf)
    loaded = serde.load(buf.getvalue())
    assert loaded.state_dict["b.weight"] is loaded.state_dict["a.weight"]
    assert isinstance(loaded.state_dict["b.weight"], torch.nn.Parameter)
    unflat = torch.export.unflatten(loaded)
    expected = torch.export.unflatten(ep)
    assert ([k for k, _ in unflat.named_parameters(remove_duplicate=False)]
            == [k for k, _ in expected.named_parameters(remove_duplicate=False)])
    assert [k for k, _ in unflat.named_buffers()] == [k for k, _ in expected.named_buffers()] == []


def test_all_weight_dtypes_bit_exact_and_views_kept():
    ep = exported("all_dtypes")
    loaded = assert_roundtrip(ep)
    dtypes = {t.dtype for t in list(loaded.state_dict.values()) + list(loaded.constants.values())}
    for dt in (torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.int16,
               torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
               torch.float8_e4m3fn, torch.float8_e5m2):
        assert dt in dtypes, dt
    w = loaded.state_dict["w_t"]
    assert not w.is_contiguous() and w.stride() == ep.state_dict["w_t"].stride()
    s = loaded.state_dict["strided"]
    assert s.storage_offset() == ep.state_dict["strided"].storage_offset() != 0


def test_training_ir_and_decomposed_ir_both_roundtrip():
    ep = exported("convnet_bn")
    assert_roundtrip(ep)
    assert_roundtrip(ep.run_decompositions())


@pytest.mark.parametrize("name", ["mlp", "cond", "dynamic_arith"])
def test_save_leaves_no_schema_objects_in_reference_cycles(name):
    # save pauses the collector; whatever it leaves in a cycle is walked by the next collection,
    # so the Structs it wrote must all be freed by reference counting.
    import gc

    from serde.core import schema

    ep = exported(name)
    serde.save(ep, io.BytesIO())  # warm the per-operator caches
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        serde.save(ep, io.BytesIO())
        gc.collect()
        left = sorted({type(o).__name__ for o in gc.garbage if isinstance(o, schema.Struct)})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
    assert left == []


def test_example_input_structures_load_as_saved_in_any_order(tmp_path):
    """Example-input specs are remembered by their exact content across loads: programs whose
    inputs differ in arity, keyword names or nesting each get their own structure back."""
    import torch

    import serde

    class Pos(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    class Kw(torch.nn.Module):
        def forward(self, x, *, y, z):
            return x + y * z

    class Nested(torch.nn.Module):
        def forward(self, xs):
            return xs[0] - xs[1]

    t = torch.ones(2)
    cases = {"pos": torch.export.export(Pos(), (t, t)),
             "kw": torch.export.export(Kw(), (t,), {"y": t, "z": t}),
             "kw2": torch.export.export(Kw(), (t,), {"z": t, "y": t}),
             "nested": torch.export.export(Nested(), ([t, t],))}
    for name, ep in cases.items():
        serde.save(ep, tmp_path / f"{name}.pt2s")

    def shape(inputs):
        args, kwargs = inputs
        return (tuple(type(a).__name__ for a in args), list(kwargs))

    for order in (list(cases), list(reversed(cases))):
        for name in order:
            loaded = serde.load(tmp_path / f"{name}.pt2s")
            assert shape(loaded.example_inputs) == shape(cases[name].example_inputs), name
