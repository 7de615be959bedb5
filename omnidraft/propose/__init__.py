"""Proposers (omnidraft.propose): each strategy drafts and translates a proposal of target tokens
behind one ``Proposer`` protocol; ``registry`` maps strategy names to them."""
