enum LedgerPlaceholder {} // replaced by the ledger implementation
