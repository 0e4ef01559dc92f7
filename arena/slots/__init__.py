"""Who owns which bytes: one :class:`~arena.slots.slot.Slot` per (micro-batch, lane), the
table of an arena's slots, the selector that picks the caller's slot, the governor that
every slot of one arena shares (mutex, lock state, growth policy), the persistent buffers
and workspace blocks (features that give each slot a store when they register), and the
lock hooks through which features take part (:mod:`arena.slots.hooks`)."""
