"""GrowingLayer holds what transformers' DynamicLayer holds, position for position, without a copy
of the whole cache at every step."""

import torch
from transformers.cache_utils import DynamicLayer

import tinylm
from tokendp.backends import HFBackend
from tokendp.backends.cache import MIN_ROOM, GrowingLayer


def _states(n, length, generator):
    return (torch.randn(n, 2, length, 4, generator=generator), torch.randn(n, 2, length, 4, generator=generator))


def test_updates_crops_and_row_selections_match_dynamic_layer():
    generator = torch.Generator().manual_seed(0)
    growing, plain = GrowingLayer(), DynamicLayer()
    assert growing.get_seq_length() == 0 and growing.keys is None

    def same():
        assert growing.get_seq_length() == plain.get_seq_length()
        torch.testing.assert_close(growing.keys, plain.keys, rtol=0, atol=0)
        torch.testing.assert_close(growing.values, plain.values, rtol=0, atol=0)

    for width in (5, 1, 1, 3, MIN_ROOM + 40, 1):  # the prefill, steps, a verified draft, a growth past the room
        k, v = _states(3, width, generator)
        out = growing.update(k, v)
        expected = plain.update(k, v)
        torch.testing.assert_close(out[0], expected[0], rtol=0, atol=0)
        same()
    growing.crop(-2)
    plain.crop(-2)
    same()
    index = torch.tensor([2, 0, 0])
    growing.batch_select_indices(index)
    plain.batch_select_indices(index)
    same()
    k, v = _states(3, 1, generator)
    growing.update(k, v)
    plain.update(k, v)
    same()


def test_a_step_writes_into_the_buffer_instead_of_copying_it():
    layer = GrowingLayer()
    layer.update(*_states(2, 10, torch.Generator().manual_seed(1)))
    buffer = layer.keys.data_ptr()
    for _ in range(MIN_ROOM):  # the room left after the first update
        layer.update(*_states(2, 1, torch.Generator().manual_seed(2)))
        assert layer.keys.data_ptr() == buffer
    assert layer.get_seq_length() == 10 + MIN_ROOM


def test_assigning_keys_and_values_replaces_the_cache():
    """join and compact assign a layer's keys and values, as they may a DynamicLayer's."""
    layer = GrowingLayer()
    layer.update(*_states(2, 6, torch.Generator().manual_seed(3)))
    kept_k, kept_v = layer.keys[..., 2:, :].clone(), layer.values[..., 2:, :].clone()
    layer.keys, layer.values = layer.keys[..., 2:, :], layer.values[..., 2:, :]
    assert layer.get_seq_length() == 4
    new_k, new_v = _states(2, 1, torch.Generator().manual_seed(4))
    keys, values = layer.update(new_k, new_v)
    torch.testing.assert_close(keys, torch.cat([kept_k, new_k], -2), rtol=0, atol=0)
    torch.testing.assert_close(values, torch.cat([kept_v, new_v], -2), rtol=0, atol=0)


def test_the_backend_decodes_with_growing_layers():
    backend = HFBackend(tinylm.model(), tinylm.tokenizer())
    assert all(type(layer) is GrowingLayer for layer in backend._new_cache().layers)
    assert backend.can_roll_back
