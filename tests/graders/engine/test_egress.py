"""The egress policy's rules on their own (graders/engine/egress.py); tests/security/
test_judge_egress.py attacks them through the workbench."""

import re

import pytest

from graders.engine.egress import EgressPolicy, EgressRefused, address_kind


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
        ("127.0.0.2", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
        ("64:ff9b::808:808", None),  # NAT64 of 8.8.8.8
        ("0.0.0.0", "unspecified"),
        ("169.254.169.254", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("239.1.1.1", "multicast"),
        ("10.1.2.3", "private"),
        ("fd00::1", "private"),
        ("100.64.0.1", "non-public"),  # carrier-grade NAT
    ],
)
def test_addresses_are_public_or_say_what_they_are(address: str, kind: str | None) -> None:
    assert address_kind(address) == kind


def test_a_bare_host_is_its_schemes_default_port_and_host_port_one_port() -> None:
    policy = EgressPolicy.parse(public_hosts=["judge.example", "other.example:8443"])
    for url in (
        "https://judge.example/v1",
        "http://JUDGE.example./v1",
        "https://other.example:8443",
    ):
        assert policy.check(url, None)
    for url in ("https://judge.example:8443/v1", "https://other.example/v1"):
        with pytest.raises(EgressRefused, match="JUDGE_BASE_URL_HOSTS"):
            policy.check(url, None)


def test_a_private_host_opens_exactly_its_port_whatever_the_public_list() -> None:
    policy = EgressPolicy.parse(public_hosts=["api.openai.com"], private_hosts=["[::1]:8000"])
    assert str(policy.check("http://[0:0::1]:8000/v1", None)) == "[::1]:8000"
    with pytest.raises(EgressRefused, match=r"\[::1\]:8001 is a loopback address"):
        policy.check("http://[::1]:8001/v1", None)
    policy.check_addresses("::1", 8000, ["::1"])  # allowed by name, whatever it resolves to


def test_an_operator_binding_replaces_the_providers_default() -> None:
    policy = EgressPolicy.parse(key_hosts=["OPENAI_API_KEY=gateway.example:8443"])
    policy.check("https://gateway.example:8443/v1", "OPENAI_API_KEY")
    with pytest.raises(
        EgressRefused, match=re.escape("only be sent to gateway.example:8443")
    ) as refused:
        policy.check("https://api.openai.com/v1", "OPENAI_API_KEY")
    assert refused.value.field == "api_key_env"
    policy.check("https://api.anthropic.com/v1", "ANTHROPIC_API_KEY")  # the others keep theirs


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"private_hosts": ["10.0.0.5"]}, "JUDGE_PRIVATE_HOSTS: '10.0.0.5' is not a host:port"),
        ({"public_hosts": ["https://x.example"]}, "JUDGE_BASE_URL_HOSTS: 'https://x.example'"),
        ({"key_hosts": ["OPENAI_API_KEY"]}, "JUDGE_API_KEY_HOSTS: 'OPENAI_API_KEY' is not"),
        ({"key_hosts": ["K=a.example:http"]}, "JUDGE_API_KEY_HOSTS: 'a.example:http'"),
        (
            {"public_hosts": ["api.openai.com", "127.0.0.1"]},  # as an older install listed it
            "JUDGE_BASE_URL_HOSTS: 127.0.0.1 is a loopback address; list it with its port in "
            "JUDGE_PRIVATE_HOSTS",
        ),
    ],
)
def test_a_malformed_setting_is_named(values: dict[str, list[str]], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        EgressPolicy.parse(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    [
        "https://judge.example/v1?",  # an empty query still moves the path into it
        "https://judge.example/v1 ",
        "https://judge.example\\@evil.example/v1",
        "https://jüdge.example/v1",
        "https://judge%2eexample/v1",
        "https:///v1",
    ],
)
def test_urls_parsers_could_read_differently_are_refused(url: str) -> None:
    with pytest.raises(EgressRefused):
        EgressPolicy().check(url, None)


def test_a_check_is_worked_out_once_and_a_refusal_every_time() -> None:
    """A reward request checks its endpoint twice (its settings, then its judge client): the
    second check is the first's answer, and a refused URL is refused again each time."""
    policy = EgressPolicy.parse(public_hosts=["api.openai.com"])
    first = policy.check("https://api.openai.com/v1", "OPENAI_API_KEY")

    assert policy.check("https://api.openai.com/v1", "OPENAI_API_KEY") is first
    assert (
        EgressPolicy.parse(public_hosts=["api.openai.com"]).check(
            "https://api.openai.com/v1", "OPENAI_API_KEY"
        )
        == first
    )
    for _ in range(2):
        with pytest.raises(EgressRefused, match="not an allowed judge host"):
            policy.check("https://example.com/v1", None)
