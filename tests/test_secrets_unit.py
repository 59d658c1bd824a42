"""Passwords by reference and the queue connectors' TLS settings, as pure logic: what is
read when, what travels pickled, which handshake failures are final."""

from __future__ import annotations

import pickle
import ssl

import pytest

from spark_ext.connectors.jms.config import JmsSourceConfig
from spark_ext.connectors.jms.tls import _fix
from spark_ext.errors import InvalidOptionError
from spark_ext.options import Options
from spark_ext.secrets import Secret, secret


def _opts(**kw: str) -> Options:
    return Options(kw, "test")


def test_a_password_file_is_read_at_each_reveal_and_only_its_name_is_pickled(tmp_path):
    f = tmp_path / "pw"
    f.write_text("first-Secret\nsecond line ignored\n")
    s = secret(_opts(passwordFile=str(f)))
    assert s == Secret("password", file=str(f)) and s.reveal() == "first-Secret"
    assert b"first-Secret" not in pickle.dumps(s) and "first-Secret" not in repr(s)
    f.write_text("rotated\n")
    assert s.reveal() == "rotated"


def test_a_password_variable_is_read_where_it_is_revealed(monkeypatch):
    monkeypatch.setenv("UNIT_PW", "from-env")
    s = secret(_opts(passwordEnv="UNIT_PW"))
    assert s is not None and s.reveal() == "from-env"
    monkeypatch.delenv("UNIT_PW")
    with pytest.raises(InvalidOptionError, match=r"spark\.executorEnv\.UNIT_PW"):
        s.reveal()


@pytest.mark.parametrize(("opts", "said"), [
    ({"password": "a", "passwordEnv": "X"}, "options 'password', 'passwordEnv' each give the password"),
    ({"passwordFile": " "}, "option 'passwordFile' is empty"),
])
def test_ambiguous_or_empty_references_are_refused(opts, said):
    with pytest.raises(InvalidOptionError, match=said):
        secret(_opts(**opts), check=False)


def test_an_empty_password_file_is_refused_naming_the_fix(tmp_path):
    (tmp_path / "pw").write_text("\n")
    with pytest.raises(InvalidOptionError, match="first line is empty"):
        secret(_opts(passwordFile=str(tmp_path / "pw")))


def test_an_inline_password_stays_inline_and_none_is_none():
    assert secret(_opts(password="p")) == Secret("password", value="p")
    assert secret(_opts()) is None


def _ssl_error(cls: type[ssl.SSLError], reason: str, text: str) -> ssl.SSLError:
    e = cls(1, text)
    e.reason = reason
    return e


@pytest.mark.parametrize(("err", "fix"), [
    (_ssl_error(ssl.SSLCertVerificationError, "CERTIFICATE_VERIFY_FAILED",
                "certificate verify failed: unable to get local issuer certificate"), "point tlsCaFile"),
    (_ssl_error(ssl.SSLCertVerificationError, "CERTIFICATE_VERIFY_FAILED",
                "certificate verify failed: Hostname mismatch, certificate is not valid for 'x'"),
     "does not name this host"),
    (_ssl_error(ssl.SSLCertVerificationError, "CERTIFICATE_VERIFY_FAILED",
                "certificate verify failed: certificate has expired"), "has expired"),
    (_ssl_error(ssl.SSLError, "WRONG_VERSION_NUMBER", "wrong version number"), "speaks clear text"),
    (_ssl_error(ssl.SSLError, "TLSV13_ALERT_CERTIFICATE_REQUIRED", "tlsv13 alert certificate required"),
     "wants a client certificate"),
    (_ssl_error(ssl.SSLError, "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "sslv3 alert certificate unknown"),
     "does not accept tlsCertFile"),
])
def test_handshake_failures_the_settings_doom_name_their_fix(err, fix):
    assert fix in (_fix(err) or ""), _fix(err)


@pytest.mark.parametrize("cls", [ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError])
def test_a_handshake_the_broker_dropped_is_retried(cls):
    assert _fix(cls(1, "EOF occurred in violation of protocol")) is None


def test_tls_comes_from_the_url_scheme_or_the_option_and_files_must_exist(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    base = {"destination": "/queue/q"}
    on = JmsSourceConfig.parse(_opts(**base, brokerUrl="stomp+ssl://h:61614", tlsCaFile=str(ca)))
    assert on.tls is not None and on.tls.ca_file == str(ca) and on.where.startswith("stomp+ssl://h:61614")
    assert JmsSourceConfig.parse(_opts(**base, tls="true", host="h")).tls is not None
    assert JmsSourceConfig.parse(_opts(**base, brokerUrl="stomp://h:61613")).tls is None
    with pytest.raises(InvalidOptionError, match="TLS is off"):
        JmsSourceConfig.parse(_opts(**base, brokerUrl="stomp://h:61613", tlsCaFile=str(ca)))
    with pytest.raises(InvalidOptionError, match="not a file"):
        JmsSourceConfig.parse(_opts(**base, brokerUrl="stomp+ssl://h:61614", tlsCaFile=str(tmp_path / "no")))
    with pytest.raises(InvalidOptionError, match="give the port"):
        JmsSourceConfig.parse(_opts(**base, brokerUrl="stomp+ssl://h"))
