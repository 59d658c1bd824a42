"""Helpers the tests share: clients of the real services, fakes for pure-logic tests, and
the sinks the conformance suite runs. Test modules import from here, never from each other."""
