"""Adversarial (fuzz) tests over every public Python API of fairq, one module per API.

Each test builds a small valid structure, then feeds hostile values into the
argument positions of its methods: NaN, +-inf, -1, 0, huge ints (2**64,
2**200), floats where ints are expected, bools, None, strings, bytes of odd
length, numpy arrays of the wrong dtype / ndim, objects whose attribute access
or hashing raises, unhashable objects, duplicate ids, unknown names and
reentrant callbacks. For every call that fails we check that

* the exception is one of the documented types (ValueError, TypeError,
  KeyError, IndexError, fairq.QueueFull): never pyo3's PanicException, a
  SystemError, or any other BaseException;
* where the test knows which argument is bad, the message names that field;
* a snapshot of everything observable (len, iteration order, stats, metrics,
  deficits, counters, tree size and match results) is identical afterwards;

and valid operations interleaved with the hostile ones keep working.
"""
