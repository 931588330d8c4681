"""The x402 tests' paying wallet: the official x402 SDK's client (x402 2.25.0) for one key, able
to pay `exact` (EIP-3009) and `upto` (Permit2) on one network, in one token up to a cap.

By default the SDK's client pays only the assets it knows (a local chain's token is none of them):
its spend controls name the token and the cap."""

from eth_account import Account
from x402 import x402Client
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.mechanisms.evm.upto import UptoEvmClientScheme


def paying_client(key, asset, network, max_amount):
    client = x402Client()
    account = Account.from_key(key)
    # Both on the network itself: a scheme registered for one network hides the wildcard's.
    register_exact_evm_client(client, account, networks=network)
    # `upto` has no register_* helper in 2.25.0: the scheme is registered by hand.
    client.register(network, UptoEvmClientScheme(account))
    client.set_spend_controls(
        {
            "allowed_assets": [
                {"network": network, "asset": asset, "max_amount_per_payment": str(max_amount)}
            ]
        }
    )
    return client
