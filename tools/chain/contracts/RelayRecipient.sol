// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ERC2771Context} from "@openzeppelin/contracts/metatx/ERC2771Context.sol";

/// A target for Relay's tests and examples: it records who the chain says called it.
/// Behind the trusted forwarder, `_msgSender()` is the signer of the forwarded request,
/// not the relayer that paid for the transaction.
contract RelayRecipient is ERC2771Context {
    event Recorded(address indexed sender, uint256 indexed tag, uint256 value, uint256 seq);

    /// Every call of `record`, in the order the chain executed them.
    address[] public senders;
    uint256[] public tags;
    mapping(address => uint256) public callsBy;

    constructor(address trustedForwarder) ERC2771Context(trustedForwarder) {}

    function record(uint256 tag) external payable {
        address sender = _msgSender();
        senders.push(sender);
        tags.push(tag);
        callsBy[sender] += 1;
        emit Recorded(sender, tag, msg.value, tags.length);
    }

    function fail(string calldata reason) external pure {
        revert(reason);
    }

    function count() external view returns (uint256) {
        return tags.length;
    }

    function lastSender() external view returns (address) {
        return senders.length == 0 ? address(0) : senders[senders.length - 1];
    }
}
