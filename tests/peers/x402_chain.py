#!/usr/bin/env python3
"""One-shot commands against a local EVM node (anvil) for the x402 tests, with web3.py and
eth-account from the x402 virtualenv (tests/peers/requirements-x402.txt).

Each command prints one JSON object on stdout and exits 0; on any failure it prints a traceback on
stderr and exits non-zero.

  x402_chain.py new-account
      -> {"address": "0x…", "key": "0x…"}   a fresh key, never funded (0 ETH, 0 tokens)
  x402_chain.py --rpc URL deploy --build DIR --key KEY [--name USDC] [--version 2]
      -> {"address": "0x…", "gas": N}       deploys DIR/Token.bin with DIR/Token.abi (the test token,
                                            tests/peers/x402/Token.sol compiled by solc-js), its
                                            constructor given (name, version), signed with KEY
  x402_chain.py --rpc URL mint --token ADDR --key KEY --to ADDR --amount N
      -> {"transaction": "0x…", "balance": N}  mints N atomic units to ADDR (KEY must be the
                                            deployer's: the token lets only its deployer mint)
  x402_chain.py --rpc URL balance --token ADDR --of ADDR
      -> {"balance": N}                     the token's balanceOf(ADDR)
  x402_chain.py --rpc URL upto --build DIR --key KEY
      -> {"permit2": "0x…", "proxy": "0x…"} deploys DIR/Permit2.bin and DIR/UptoProxy.bin
                                            (tests/peers/x402/Permit2.sol) and copies their code to
                                            the addresses the x402 SDK settles `upto` through
                                            (anvil_setCode): Permit2's canonical address and x402's
                                            upto proxy's
  x402_chain.py --rpc URL approve-permit2 --token ADDR --key KEY
      -> {"transaction": "0x…"}             gives KEY's account 1 ETH (anvil_setBalance) and has it
                                            approve Permit2 for all its tokens: the one-time step
                                            a payer takes before paying by Permit2

Transactions are signed here with the key given (legacy gas price from the node), sent raw, and
waited for; a reverted one is an error. anvil mines each at once.
"""

import argparse
import json
import os
import sys

from eth_account import Account
from web3 import Web3

BALANCE_OF_ABI = [
    {
        "type": "function",
        "name": "balanceOf",
        "stateMutability": "view",
        "inputs": [{"name": "account", "type": "address"}],
        "outputs": [{"name": "", "type": "uint256"}],
    }
]
MINT_ABI = [
    {
        "type": "function",
        "name": "mint",
        "stateMutability": "nonpayable",
        "inputs": [{"name": "to", "type": "address"}, {"name": "value", "type": "uint256"}],
        "outputs": [],
    }
]


def web3(rpc):
    if not rpc:
        raise SystemExit("--rpc URL is needed for this command")
    return Web3(Web3.HTTPProvider(rpc, request_kwargs={"timeout": 20}))


def send(w3, account, tx):
    """Signs `tx` (from `account`), sends it and returns its receipt; raises if it reverted."""
    tx = dict(tx)
    tx.setdefault("from", account.address)
    tx["nonce"] = w3.eth.get_transaction_count(account.address, "pending")
    tx["chainId"] = w3.eth.chain_id
    tx["gasPrice"] = w3.eth.gas_price
    if "gas" not in tx:
        tx["gas"] = w3.eth.estimate_gas(tx)
    signed = account.sign_transaction(tx)
    tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=20)
    if receipt["status"] != 1:
        raise SystemExit(f"transaction {tx_hash.to_0x_hex()} reverted")
    return receipt


def new_account(_args):
    account = Account.create()
    return {"address": account.address, "key": account.key.to_0x_hex()}


def deploy(args):
    w3 = web3(args.rpc)
    account = Account.from_key(args.key)
    with open(os.path.join(args.build, "Token.abi")) as f:
        abi = json.load(f)
    with open(os.path.join(args.build, "Token.bin")) as f:
        bytecode = f.read().strip()
    contract = w3.eth.contract(abi=abi, bytecode=bytecode)
    tx = contract.constructor(args.name, args.version).build_transaction(
        {"from": account.address, "gasPrice": w3.eth.gas_price, "nonce": 0}
    )
    receipt = send(w3, account, tx)
    return {"address": receipt["contractAddress"], "gas": receipt["gasUsed"]}


def mint(args):
    w3 = web3(args.rpc)
    account = Account.from_key(args.key)
    token = w3.eth.contract(address=Web3.to_checksum_address(args.token), abi=MINT_ABI + BALANCE_OF_ABI)
    to = Web3.to_checksum_address(args.to)
    tx = token.functions.mint(to, args.amount).build_transaction(
        {"from": account.address, "gasPrice": w3.eth.gas_price, "nonce": 0}
    )
    receipt = send(w3, account, tx)
    return {
        "transaction": receipt["transactionHash"].to_0x_hex(),
        "balance": token.functions.balanceOf(to).call(),
    }


def balance(args):
    w3 = web3(args.rpc)
    token = w3.eth.contract(address=Web3.to_checksum_address(args.token), abi=BALANCE_OF_ABI)
    return {"balance": token.functions.balanceOf(Web3.to_checksum_address(args.of)).call()}


# Where the x402 SDK (2.25.0, x402/mechanisms/evm/constants.py) expects the contracts.
PERMIT2_ADDRESS = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
UPTO_PROXY_ADDRESS = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"

APPROVE_ABI = [
    {
        "type": "function",
        "name": "approve",
        "stateMutability": "nonpayable",
        "inputs": [{"name": "spender", "type": "address"}, {"name": "value", "type": "uint256"}],
        "outputs": [{"name": "", "type": "bool"}],
    }
]


def upto(args):
    w3 = web3(args.rpc)
    account = Account.from_key(args.key)
    placed = {}
    for name, address in (("Permit2", PERMIT2_ADDRESS), ("UptoProxy", UPTO_PROXY_ADDRESS)):
        with open(os.path.join(args.build, f"{name}.bin")) as f:
            bytecode = f.read().strip()
        tx = {"from": account.address, "data": "0x" + bytecode, "gasPrice": w3.eth.gas_price}
        deployed = send(w3, account, tx)["contractAddress"]
        code = w3.eth.get_code(deployed)
        w3.provider.make_request("anvil_setCode", [address, code.to_0x_hex()])
        if w3.eth.get_code(address) != code:
            raise SystemExit(f"{name}'s code did not reach {address}")
        placed[name] = address
    return {"permit2": placed["Permit2"], "proxy": placed["UptoProxy"]}


def approve_permit2(args):
    w3 = web3(args.rpc)
    account = Account.from_key(args.key)
    w3.provider.make_request("anvil_setBalance", [account.address, hex(10**18)])
    token = w3.eth.contract(address=Web3.to_checksum_address(args.token), abi=APPROVE_ABI)
    tx = token.functions.approve(PERMIT2_ADDRESS, 2**256 - 1).build_transaction(
        {"from": account.address, "gasPrice": w3.eth.gas_price, "nonce": 0}
    )
    receipt = send(w3, account, tx)
    return {"transaction": receipt["transactionHash"].to_0x_hex()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rpc", help="the node's JSON-RPC URL, e.g. http://127.0.0.1:8545")
    sub = ap.add_subparsers(dest="command", required=True)

    sub.add_parser("new-account").set_defaults(run=new_account)

    p = sub.add_parser("deploy")
    p.add_argument("--build", required=True, help="directory holding Token.bin and Token.abi")
    p.add_argument("--key", required=True, help="the deployer's private key (it becomes the minter)")
    p.add_argument("--name", default="USDC")
    p.add_argument("--version", default="2")
    p.set_defaults(run=deploy)

    p = sub.add_parser("mint")
    p.add_argument("--token", required=True)
    p.add_argument("--key", required=True, help="the deployer's private key")
    p.add_argument("--to", required=True)
    p.add_argument("--amount", required=True, type=int)
    p.set_defaults(run=mint)

    p = sub.add_parser("balance")
    p.add_argument("--token", required=True)
    p.add_argument("--of", required=True)
    p.set_defaults(run=balance)

    p = sub.add_parser("upto")
    p.add_argument("--build", required=True, help="directory holding Permit2.bin and UptoProxy.bin")
    p.add_argument("--key", required=True, help="the key that deploys them")
    p.set_defaults(run=upto)

    p = sub.add_parser("approve-permit2")
    p.add_argument("--token", required=True)
    p.add_argument("--key", required=True, help="the payer's private key")
    p.set_defaults(run=approve_permit2)

    args = ap.parse_args()
    print(json.dumps(args.run(args)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
