// SPDX-License-Identifier: Apache-2.0
//
// The x402 tests' stablecoin: a minimal ERC-20 (https://eips.ethereum.org/EIPS/eip-20) with
// EIP-3009's transferWithAuthorization (https://eips.ethereum.org/EIPS/eip-3009), the method an
// x402 `exact` payment on EVM settles through (the x402 spec's
// https://github.com/coinbase/x402/blob/main/specs/schemes/exact/scheme_exact_evm.md). Written for
// the tests: a local anvil node runs it, the official x402 SDK's facilitator settles in it.
//
// What the SDK's facilitator relies on, and so what this keeps:
// - name() and version() are the EIP-712 domain's (the tests deploy "USDC" / "2", the domain a
//   payment's `extra` names), over (name, version, chainid, address(this));
// - the v/r/s overload of transferWithAuthorization (the SDK calls it for a 65-byte signature);
// - a standard Transfer(from, to, value) log: settlement checks the receipt for it;
// - the revert strings below, word for word: the facilitator maps them to its reasons
//   (`invalid_exact_evm_nonce_already_used`, `…_insufficient_balance`, …); any other revert sends
//   it to a diagnosis through Multicall3, which anvil does not have.
// approve / allowance / transferFrom are there for Permit2, which pulls tokens with them.
pragma solidity ^0.8.20;

contract Token {
    string public name;
    string public version;
    uint8 public constant decimals = 6;
    uint256 public totalSupply;
    /// Who may mint: the deployer.
    address public immutable minter;

    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    /// Whether `authorizer` has used the authorization `nonce` (EIP-3009).
    mapping(address => mapping(bytes32 => bool)) public authorizationState;

    bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    bytes32 private constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    /// secp256k1's order halved: a signature's s above it is the malleable twin of one below.
    uint256 private constant HALF_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);

    constructor(string memory name_, string memory version_) {
        name = name_;
        version = version_;
        minter = msg.sender;
    }

    /// The EIP-712 domain separator, computed on each call so that it follows the chain id.
    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(
            abi.encode(DOMAIN_TYPEHASH, keccak256(bytes(name)), keccak256(bytes(version)), block.chainid, address(this))
        );
    }

    function mint(address to, uint256 value) external {
        require(msg.sender == minter, "only the minter mints");
        totalSupply += value;
        balanceOf[to] += value;
        emit Transfer(address(0), to, value);
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            require(allowed >= value, "transfer amount exceeds allowance");
            allowance[from][msg.sender] = allowed - value;
        }
        _transfer(from, to, value);
        return true;
    }

    /// Moves `value` from `from` to `to` on `from`'s signed authorization, once per nonce, in the
    /// window validAfter < now < validBefore (EIP-3009); anyone may submit it.
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        require(block.timestamp > validAfter, "authorization is not yet valid");
        require(block.timestamp < validBefore, "authorization is expired");
        require(!authorizationState[from][nonce], "authorization is used or canceled");
        bytes32 structHash =
            keccak256(abi.encode(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce));
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
        require(uint256(s) <= HALF_ORDER && (v == 27 || v == 28), "invalid signature");
        address signer = ecrecover(digest, v, r, s);
        require(signer != address(0) && signer == from, "invalid signature");
        authorizationState[from][nonce] = true;
        emit AuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }

    function _transfer(address from, address to, uint256 value) private {
        require(balanceOf[from] >= value, "transfer amount exceeds balance");
        unchecked {
            balanceOf[from] -= value;
        }
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}
