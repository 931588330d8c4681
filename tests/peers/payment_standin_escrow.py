"""One escrow, two views: how payment_standin.py moves a seller's payment and the purchase of it.

The real seller's node and purchaser's node never talk; they both watch the escrow contract on chain. The
stand-in keeps a payment (seller side, keyed by blockchainIdentifier) and at most one purchase of it
(purchaser side, same key) and moves both on a "tick": the node's clock, which the stand-in runs on every
resolve of either side (S2 or P2) for that identifier. A tick, in order:

  1. the purchase's lock lands (purchase_mode "lock", once `lock_after_ms` after P1, and only by payByTime):
     the purchase becomes FundsLocked; the payment too, with BuyerWallet and CurrentTransaction, if the
     locked amounts equal its RequestedFunds, else FundsOrDatumInvalid ("Payment amounts do not match…");
  2. a purchase still unlocked at payByTime + lock_grace_ms: FundsOrDatumInvalid with the node's note;
  3. (S2 only) the instant buyer of `lock_on_poll` locks the payment;
  4. a payment still unlocked at payByTime + payment_grace_ms: FundsOrDatumInvalid with the node's note;
  5. a queued S4 (SubmitResultRequested) lands while submitResultTime is more than 5 min away:
     ResultSubmitted (from FundsLocked) or Disputed (from RefundRequested, Disputed), resultHash set;
     the purchase sees the same state and hash.
Sources: tx-sync (`src/services/transactions/tx-sync/`), the submit-result batcher, the contract's state
machine (smart-contracts/payment/state_machine_diagram.md), all in masumi-payment-service.
"""

import secrets
from datetime import datetime, timezone

from payment_standin_rules import funds_equal

MINUTE_MS = 60 * 1000
SPOOF_NOTE = "Payment amounts do not match. This likely is a spoofing attempt."


def now_iso():
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def payment_action(action, error_type=None, note=None, result_hash=None):
    """A Payment's NextAction (it carries the queued resultHash; a Purchase's does not)."""
    return {"requestedAction": action, "errorType": error_type, "errorNote": note, "resultHash": result_hash}


def purchase_action(action, error_type=None, note=None):
    return {"requestedAction": action, "errorType": error_type, "errorNote": note}


def transaction(previous, new):
    """A confirmed transaction on the escrow (the CurrentTransaction of both views)."""
    now = now_iso()
    return {
        "id": "cl" + secrets.token_hex(11),
        "createdAt": now,
        "updatedAt": now,
        "txHash": secrets.token_hex(32),
        "status": "Confirmed",
        "fees": "180000",
        "blockHeight": None,
        "blockTime": None,
        "previousOnChainState": previous,
        "newOnChainState": new,
        "confirmations": 1,
    }


def _move(obj, state, tx=None):
    if tx is None:
        tx = transaction(obj["onChainState"], state)
    obj["onChainState"] = state
    obj["CurrentTransaction"] = dict(tx)
    obj["updatedAt"] = now_iso()
    return tx


def _grace_note(kind, pay_by, grace_ms):
    seconds = grace_ms / 1000
    seconds = int(seconds) if seconds == int(seconds) else seconds
    return (
        f"{kind} request payByTime ({pay_by}) passed without on-chain lock; "
        f"no FundsLocked tx observed within {seconds}s grace."
    )


def lock_payment(payment, funds, buyer_vkey, tx=None):
    """A lock tx for `payment` is seen on chain, locking `funds` from the wallet `buyer_vkey`."""
    if tx is None:
        tx = transaction(None, "FundsLocked")
    payment["BuyerWallet"] = {"id": "cl" + secrets.token_hex(11), "walletVkey": buyer_vkey}
    if funds_equal(funds, payment["RequestedFunds"]):
        _move(payment, "FundsLocked", tx)
    else:
        _move(payment, "FundsOrDatumInvalid", tx)
        payment["NextAction"] = payment_action("WaitingForManualAction", "Unknown", SPOOF_NOTE)


def _unlocked(payment):
    return (
        payment is not None
        and payment["onChainState"] is None
        and payment["NextAction"]["requestedAction"] == "WaitingForExternalAction"
    )


def tick(payment, purchase, cfg, now_ms, poll_lock=False):
    """One tick of the node's clock for one escrow (see the module doc). `cfg` is the stand-in's config;
    `poll_lock`: this S2 poll is the one `lock_on_poll` names."""
    if purchase is not None and purchase["onChainState"] is None:
        pay_by = int(purchase["payByTime"])
        waiting = purchase["NextAction"]["requestedAction"] == "FundsLockingRequested"
        if (
            waiting
            and purchase["_mode"] == "lock"
            and now_ms <= pay_by
            and now_ms >= purchase["_created_ms"] + int(cfg["lock_after_ms"])
        ):
            tx = _move(purchase, "FundsLocked")
            purchase["NextAction"] = purchase_action("WaitingForExternalAction")
            if _unlocked(payment):
                lock_payment(payment, purchase["PaidFunds"], cfg["buyer_vkey"], tx)
        elif now_ms > pay_by + int(cfg["lock_grace_ms"]):
            purchase["onChainState"] = "FundsOrDatumInvalid"
            purchase["NextAction"] = purchase_action(
                "WaitingForManualAction", "Unknown", _grace_note("Purchase", pay_by, int(cfg["lock_grace_ms"]))
            )
    if payment is None:
        return
    pay_by = int(payment["payByTime"])
    if poll_lock and _unlocked(payment) and now_ms <= pay_by:
        lock_payment(payment, payment["RequestedFunds"], cfg["buyer_vkey"])
    if _unlocked(payment) and now_ms > pay_by + int(cfg["payment_grace_ms"]):
        payment["onChainState"] = "FundsOrDatumInvalid"
        payment["NextAction"] = payment_action(
            "WaitingForManualAction", "Unknown", _grace_note("Payment", pay_by, int(cfg["payment_grace_ms"]))
        )
    queued = payment["NextAction"]
    # The batcher sends a result only while submitResultTime is more than 5 minutes away.
    in_time = int(payment["submitResultTime"]) > now_ms + 5 * MINUTE_MS
    if queued["requestedAction"] == "SubmitResultRequested" and in_time:
        state = "ResultSubmitted" if payment["onChainState"] == "FundsLocked" else "Disputed"
        tx = _move(payment, state)
        payment["resultHash"] = queued["resultHash"]
        payment["NextAction"] = payment_action("WaitingForExternalAction")
        if purchase is not None and purchase["onChainState"] in ("FundsLocked", "ResultSubmitted"):
            _move(purchase, state, tx)
            purchase["resultHash"] = payment["resultHash"]


def refund_requested(payment):
    """P4 accepted on the purchase: the same escrow now carries the buyer's refund request."""
    if payment is not None and payment["onChainState"] in ("FundsLocked", "ResultSubmitted"):
        _move(payment, "RefundRequested" if payment["onChainState"] == "FundsLocked" else "Disputed")


def _finish(obj, state, tx, seller=None, buyer=None, payment_side=True):
    _move(obj, state, tx)
    obj["NextAction"] = payment_action("None") if payment_side else purchase_action("None")
    obj["WithdrawnForSeller"] = seller or []
    obj["WithdrawnForBuyer"] = buyer or []


def settle(payment, purchase, how, seller_amount=None):
    """The end states the node reaches on its own clock, by hand: `how` is "withdraw" (the seller collects
    after unlockTime: from ResultSubmitted), "refund" (the buyer collects: from FundsLocked, RefundRequested
    or Disputed) or "split" (admins after externalDisputeUnlockTime: from Disputed; `seller_amount` to the
    seller, the rest to the buyer). Returns None, or why the payment cannot get there."""
    state = payment["onChainState"]
    funds = payment["RequestedFunds"]
    if how == "withdraw":
        if state != "ResultSubmitted":
            return f"cannot withdraw a payment in {state}: it must be ResultSubmitted"
        end, seller, buyer = "Withdrawn", [dict(f) for f in funds], []
    elif how == "refund":
        if state not in ("FundsLocked", "RefundRequested", "Disputed"):
            return f"cannot refund a payment in {state}: it must be FundsLocked, RefundRequested or Disputed"
        end, seller, buyer = "RefundWithdrawn", [], [dict(f) for f in funds]
    else:
        if state != "Disputed":
            return f"cannot split a payment in {state}: it must be Disputed"
        unit = funds[0]["unit"] if funds else ""
        total = sum(int(f["amount"]) for f in funds if f["unit"] == unit)
        if not str(seller_amount).isdigit() or int(seller_amount) > total:
            return f"seller_amount must be a whole number from 0 to {total}"
        end = "DisputedWithdrawn"
        seller = [{"amount": str(int(seller_amount)), "unit": unit}]
        rest = total - int(seller_amount)
        buyer = [{"amount": str(rest), "unit": unit}] if rest > 0 else []
    tx = transaction(state, end)
    _finish(payment, end, tx, seller, buyer)
    if purchase is not None and purchase["onChainState"] is not None:
        _finish(purchase, end, tx, seller, buyer, payment_side=False)
    return None
