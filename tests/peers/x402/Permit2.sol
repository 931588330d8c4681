// SPDX-License-Identifier: MIT
pragma solidity ^0.8.26;

// The two contracts an x402 `upto` payment settles through, written for the tests: what a
// facilitator built on the official x402 SDK calls, with the checks the real ones make.
//
// - `Permit2`: the signature-transfer half of Uniswap's Permit2
//   (https://github.com/Uniswap/permit2, `SignatureTransfer.permitWitnessTransferFrom`), with its
//   EIP-712 domain {name "Permit2", chainId, verifyingContract} and its unordered nonces. Its
//   domain is computed from `address(this)`, so its code can be placed at the canonical address
//   (0x000000000022D473030F116dDEE9F6B43aC78BA3) with anvil_setCode.
// - `UptoProxy`: x402's `upto` proxy (`settle(permit, amount, owner, witness, signature)`, the
//   witness {to, facilitator, validAfter}; https://github.com/coinbase/x402, specs/schemes/upto),
//   placed at 0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002: only the witness's facilitator may
//   settle, at most the permitted amount, not before validAfter, and never 0.

interface IERC20 {
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

contract Permit2 {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    bytes32 private constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,uint256 chainId,address verifyingContract)");
    bytes32 private constant TOKEN_PERMISSIONS_TYPEHASH =
        keccak256("TokenPermissions(address token,uint256 amount)");
    string private constant WITNESS_STUB =
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,";

    mapping(address => mapping(uint256 => uint256)) public nonceBitmap;

    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, keccak256("Permit2"), block.chainid, address(this)));
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external {
        require(block.timestamp <= permit.deadline, "SignatureExpired");
        require(transferDetails.requestedAmount <= permit.permitted.amount, "InvalidAmount");
        useNonce(owner, permit.nonce);
        checkSigner(digest(permit, witness, witnessTypeString), owner, signature);
        require(
            IERC20(permit.permitted.token).transferFrom(owner, transferDetails.to, transferDetails.requestedAmount),
            "TransferFailed"
        );
    }

    // In functions of their own: one body holding every value overflows the EVM's stack.
    function digest(PermitTransferFrom calldata permit, bytes32 witness, string calldata witnessTypeString)
        private
        view
        returns (bytes32)
    {
        bytes32 typeHash = keccak256(abi.encodePacked(WITNESS_STUB, witnessTypeString));
        bytes32 permitted =
            keccak256(abi.encode(TOKEN_PERMISSIONS_TYPEHASH, permit.permitted.token, permit.permitted.amount));
        bytes32 structHash = keccak256(abi.encode(typeHash, permitted, msg.sender, permit.nonce, permit.deadline, witness));
        return keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
    }

    function checkSigner(bytes32 hash, address owner, bytes calldata signature) private pure {
        require(signature.length == 65, "InvalidSignatureLength");
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        address signer = ecrecover(hash, v, r, s);
        require(signer != address(0) && signer == owner, "InvalidSigner");
    }

    function useNonce(address owner, uint256 nonce) private {
        uint256 bit = 1 << (nonce & 0xff);
        uint256 flipped = nonceBitmap[owner][nonce >> 8] ^= bit;
        require(flipped & bit != 0, "InvalidNonce");
    }
}

contract UptoProxy {
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    address private constant PERMIT2 = 0x000000000022D473030F116dDEE9F6B43aC78BA3;
    bytes32 private constant WITNESS_TYPEHASH =
        keccak256("Witness(address to,address facilitator,uint256 validAfter)");
    string private constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";

    function settle(
        Permit2.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        require(amount != 0, "InvalidAmount");
        require(amount <= permit.permitted.amount, "AmountExceedsPermitted");
        require(msg.sender == witness.facilitator, "UnauthorizedFacilitator");
        require(block.timestamp >= witness.validAfter, "PaymentTooEarly");
        bytes32 hashed = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        Permit2(PERMIT2).permitWitnessTransferFrom(
            permit,
            Permit2.SignatureTransferDetails(witness.to, amount),
            owner,
            hashed,
            WITNESS_TYPE_STRING,
            signature
        );
    }
}
