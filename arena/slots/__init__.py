"""Who owns which bytes: one :class:`~arena.slots.slot.Slot` per (micro-batch, lane), the
table of an arena's slots, the selector that picks the caller's slot, the governor that
every slot of one arena shares (mutex, lock state, growth policy), each slot's persistent
and workspace stores, and the lock hooks through which features above take part
(:mod:`arena.slots.hooks`)."""
