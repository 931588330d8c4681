#!/usr/bin/env python3
"""Test vectors for interlingua's x402 payer (src/payment/x402/sign.rs), made by the official x402
Python SDK (x402 2.25.0, with eth-account 0.13), and the SDK's facilitator-side check of
payloads that the Rust code made.

  x402_sign_vectors.py [vectors]   print the vectors, one JSON document: for each case the 402's
                                   parts (requirements, resource, extensions), the fixed clock and
                                   nonce, the PaymentPayload the SDK's own client builds
                                   (x402ClientSync with ExactEvmScheme / UptoEvmScheme around an
                                   eth_account LocalAccount), and the EIP-712 digest the SDK's
                                   facilitator code computes for it. Each payload is also run
                                   through the SDK facilitator's verification (below) first.
  x402_sign_vectors.py verify      read PaymentPayload JSON documents, one a line, from stdin
                                   (lines of other text, such as cargo's, are skipped; a payload
                                   line may carry a prefix ending in a space before its "{"), and
                                   run each through the SDK facilitator's verification at the
                                   present time. Prints one line per payload; exits 1 if any fails.

The facilitator's verification is the SDK's own code path with simulation off, against an
offline stand-in for the chain: the payer has no code (an EOA, so the signature is checked by
ecrecover), the asset has code, balances and Permit2 allowances are ample, and the facilitator
is the one the payload names. What is left, and checked, is every field check of the SDK's
verify and the signature's recovery.

Time and randomness are fixed by patching time.time and os.urandom while the SDK builds a
payload: the client schemes read the clock with int(time.time()) and draw their nonce with
os.urandom(32) (x402/mechanisms/evm/utils.py: create_nonce, create_permit2_nonce). ECDSA
signing is deterministic (RFC 6979), so a fixed key, clock and nonce give one signature.

The key is the first development account of Hardhat and Anvil: public, and never to hold value.
"""

import json
import sys
import time
from contextlib import contextmanager
from unittest import mock

from eth_account import Account
from x402 import x402ClientSync
from x402.mechanisms.evm.constants import PERMIT2_ADDRESS
from x402.mechanisms.evm.eip712 import hash_eip3009_authorization
from x402.mechanisms.evm.exact import ExactEvmFacilitatorScheme, ExactEvmScheme
from x402.mechanisms.evm.exact.permit2_utils import _build_permit2_typed_data, verify_permit2
from x402.mechanisms.evm.types import (
    ExactEIP3009Payload,
    ExactPermit2Payload,
    UptoPermit2Payload,
)
from x402.mechanisms.evm.upto import UptoEvmClientScheme
from x402.mechanisms.evm.upto.permit2_utils import (
    _build_upto_permit2_typed_data,
    verify_upto_permit2,
)
from x402.mechanisms.evm.utils import get_evm_chain_id
from x402.mechanisms.evm.verify import _hash_typed_data
from x402.schemas import PaymentPayload, PaymentRequired, PaymentRequirements

KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

USDC_BASE_SEPOLIA = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
USDC_BASE = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"

# Each case is one 402 with one offer. The cases cover what the SDK does to its input:
# addresses kept as given (exact/EIP-3009) or checksummed (Permit2), unknown fields of the offer
# and of the resource dropped, extra echoed whole, a maxTimeoutSeconds of 0 read as 3600, a
# missing extra.version read as "1", nonces with the top bit set (the Permit2 nonce's decimal).
CASES = [
    {
        "name": "exact_eip3009_base_sepolia",
        "now": 1767225600,
        "nonce": "f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff01",
        "requirements": {
            "scheme": "exact",
            "network": "eip155:84532",
            "asset": USDC_BASE_SEPOLIA,
            "amount": "10000",
            "payTo": "0x209693bc6afc0c5328ba36faf03c514ef312287c",
            "maxTimeoutSeconds": 300,
            "extra": {"name": "USDC", "version": "2"},
            "description": "an offer's field the SDK's model does not know",
        },
        "resource": {
            "url": "https://agent.example/a2a",
            "description": "Translate a text",
            "mimeType": "application/json",
            "unknownField": "dropped by the SDK",
        },
        "extensions": None,
    },
    {
        "name": "exact_eip3009_default_timeout_and_version",
        "now": 1767225601,
        "nonce": "00000000000000000000000000000000000000000000000000000000000000ff",
        "requirements": {
            "scheme": "exact",
            "network": "eip155:8453",
            "asset": USDC_BASE.lower(),
            "amount": "0001500000",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "maxTimeoutSeconds": 0,
            "extra": {"name": "USD Coin", "note": ["kept", 1, True, None]},
        },
        # The client signs with version "1"; the SDK's facilitator refuses an offer without one.
        "facilitator_refuses": "missing_eip712_domain",
        "resource": None,
        "extensions": {"bazaar": {"info": {"input": {"type": "http"}}, "schema": {"type": "object"}}},
    },
    {
        "name": "exact_permit2",
        "now": 1767225602,
        "nonce": "8000000000000000000000000000000000000000000000000000000000000001",
        "requirements": {
            "scheme": "exact",
            "network": "eip155:84532",
            "asset": USDC_BASE_SEPOLIA.lower(),
            "amount": "2500",
            "payTo": "0x209693bc6afc0c5328ba36faf03c514ef312287c",
            "maxTimeoutSeconds": 60,
            "extra": {"name": "USDC", "version": "2", "assetTransferMethod": "permit2"},
        },
        "resource": {"url": "https://agent.example/mcp"},
        "extensions": None,
    },
    {
        "name": "upto_permit2",
        "now": 1767225603,
        "nonce": "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "requirements": {
            "scheme": "upto",
            "network": "eip155:84532",
            "asset": USDC_BASE_SEPOLIA,
            "amount": "1000000",
            "payTo": "0x209693bc6afc0c5328ba36faf03c514ef312287c",
            "maxTimeoutSeconds": 600,
            "extra": {
                "name": "USDC",
                "version": "2",
                "facilitatorAddress": "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
            },
        },
        "resource": {"url": "https://agent.example/run", "description": "Run a job"},
        "extensions": None,
    },
]


@contextmanager
def fixed(now, nonce_hex):
    """The SDK's clock and randomness, fixed (a fraction of a second too: it truncates)."""
    nonce = bytes.fromhex(nonce_hex)

    def urandom(n):
        if n != len(nonce):
            raise AssertionError(f"the SDK asked for {n} random bytes, not {len(nonce)}")
        return nonce

    with mock.patch("time.time", return_value=now + 0.75), mock.patch("os.urandom", urandom):
        yield


def sdk_payload(case):
    """The PaymentPayload the SDK's client builds for the case's 402, as its header carries it."""
    account = Account.from_key(KEY)
    client = x402ClientSync()
    client.register("eip155:*", ExactEvmScheme(account))
    client.register("eip155:*", UptoEvmClientScheme(account))
    # The spend controls pay only the SDK's known assets by default: not what is tested here.
    client.set_spend_controls(False)
    required = PaymentRequired.model_validate(
        {
            "x402Version": 2,
            "resource": case["resource"],
            "accepts": [case["requirements"]],
            "extensions": case["extensions"],
        }
    )
    with fixed(case["now"], case["nonce"]):
        payload = client.create_payment_payload(required)
    # What encode_payment_signature_header encodes (x402/http/utils.py).
    return json.loads(payload.model_dump_json(by_alias=True, exclude_none=True))


def digest(payload):
    """The EIP-712 digest, as the SDK's facilitator computes it for the payload."""
    accepted = PaymentRequirements.model_validate(payload["accepted"])
    chain_id = get_evm_chain_id(accepted.network)
    inner = payload["payload"]
    if "authorization" in inner:
        auth = ExactEIP3009Payload.from_dict(inner).authorization
        extra = accepted.extra
        return hash_eip3009_authorization(
            auth, chain_id, accepted.asset, extra["name"], extra.get("version", "1")
        )
    if "facilitator" in inner["permit2Authorization"]["witness"]:
        auth = UptoPermit2Payload.from_dict(inner).permit2_authorization
        return _hash_typed_data(*_build_upto_permit2_typed_data(auth, chain_id))
    auth = ExactPermit2Payload.from_dict(inner).permit2_authorization
    return _hash_typed_data(*_build_permit2_typed_data(auth, chain_id))


class OfflineChain:
    """A FacilitatorEvmSigner with no chain behind it: see the module's docstring."""

    def __init__(self, payer, facilitator):
        self._payer = payer.lower()
        self._facilitator = facilitator

    def get_addresses(self):
        return [self._facilitator]

    def get_code(self, address):
        return b"" if address.lower() == self._payer else b"\x60\x80\x60\x40"

    def read_contract(self, address, abi, function_name, *args):
        if function_name == "allowance":
            return 2**256 - 1
        if function_name == "balanceOf":
            return 10**30
        raise AssertionError(f"the offline chain cannot answer {function_name}")


def facilitator_verify(payload):
    """The SDK facilitator's verdict on the payload, at the present (possibly patched) time."""
    document = PaymentPayload.model_validate(payload)
    requirements = document.accepted
    inner = document.payload
    facilitator = requirements.extra.get("facilitatorAddress", "0x" + "11" * 20)
    if "authorization" in inner:
        payer = inner["authorization"]["from"]
        chain = OfflineChain(payer, facilitator)
        verdict, _ = ExactEvmFacilitatorScheme(chain)._verify(
            document, requirements, simulate=False
        )
        return verdict
    payer = inner["permit2Authorization"]["from"]
    chain = OfflineChain(payer, facilitator)
    if requirements.scheme == "upto":
        return verify_upto_permit2(chain, document, requirements, simulate=False)
    return verify_permit2(chain, document, requirements)


def vectors():
    out = {"key": KEY, "address": Account.from_key(KEY).address, "cases": []}
    for case in CASES:
        payload = sdk_payload(case)
        with mock.patch("time.time", return_value=case["now"] + 1.0):
            verdict = facilitator_verify(payload)
        expected = case.get("facilitator_refuses")
        if verdict.is_valid == bool(expected) or (expected and verdict.invalid_reason != expected):
            raise SystemExit(f"{case['name']}: the SDK's facilitator says {verdict}, not {expected or 'valid'}")
        out["cases"].append(
            {
                "name": case["name"],
                "now": case["now"],
                "nonce": case["nonce"],
                "requirements": case["requirements"],
                "resource": case["resource"],
                "extensions": case["extensions"],
                "facilitator_refuses": case.get("facilitator_refuses"),
                "digest": "0x" + digest(payload).hex(),
                "payload": payload,
            }
        )
    print(json.dumps(out, indent=1))


def verify():
    failed = 0
    count = 0
    for line in sys.stdin:
        start = line.find("{")
        if start < 0 or (start > 0 and line[start - 1] != " "):
            continue
        payload = json.loads(line[start:])
        count += 1
        verdict = facilitator_verify(payload)
        inner = payload["payload"]
        auth = inner.get("authorization") or inner["permit2Authorization"]
        label = f"{payload['accepted']['scheme']} {'permit2' if 'permit2Authorization' in inner else 'eip3009'}"
        if verdict.is_valid:
            print(f"ok   {label} from {auth['from']} nonce {auth['nonce']}")
        else:
            failed += 1
            print(f"FAIL {label}: {verdict.invalid_reason} {verdict.invalid_message or ''}")
    if count == 0:
        raise SystemExit("no payloads on stdin")
    print(f"{count - failed} of {count} payloads verified by the SDK's facilitator")
    return 1 if failed else 0


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "vectors"
    if mode == "vectors":
        vectors()
        return 0
    if mode == "verify":
        return verify()
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
