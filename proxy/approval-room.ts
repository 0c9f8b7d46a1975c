// docs/spec.md §3.10: the requests one broker holds for approval are bounded in number and in bytes of
// body (`approvals.max_pending`, `approvals.max_bytes`; decision 108). The bound is this
// process's: the bodies are in its memory whichever store lists the requests (in a fleet the
// Redis store lists every broker's, but each body stays with the broker that holds it).
//
// A place is taken before the body is read, so bodies still arriving count: a declared length
// is counted whole before a byte is read, a chunked body chunk by chunk as it arrives.

export interface RoomLimits {
  readonly maxPending: number;
  readonly maxBytes: number;
}

/** One request's place in the room: its body's bytes, counted until it is let go. */
export interface Place {
  /** Counts `n` more bytes; false (and nothing counted) when they would pass `maxBytes`. */
  add(n: number): boolean;
  /** Gives the place and its bytes back (once; later calls do nothing). */
  release(): void;
}

export class ApprovalRoom {
  #pending = 0;
  #bytes = 0;

  /** Requests holding a place: held, or having their body read to be held. */
  get pending(): number {
    return this.#pending;
  }

  /** Bytes of body those requests keep. */
  get bytes(): number {
    return this.#bytes;
  }

  /** A place for one more request, or undefined when `limits.maxPending` are taken. */
  enter(limits: RoomLimits): Place | undefined {
    if (this.#pending >= limits.maxPending) return undefined;
    this.#pending++;
    let mine = 0;
    let released = false;
    return {
      add: (n) => {
        if (released || this.#bytes + n > limits.maxBytes) return false;
        this.#bytes += n;
        mine += n;
        return true;
      },
      release: () => {
        if (released) return;
        released = true;
        this.#pending--;
        this.#bytes -= mine;
      },
    };
  }
}
