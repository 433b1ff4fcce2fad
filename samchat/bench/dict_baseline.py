"""A plain-Python suffix automaton with a dict per state, as the reference systems write it.

Only for `samchat bench index`, to measure what the packed, compiled core gains over it.
"""

from __future__ import annotations


class DictAutomaton:
    def __init__(self) -> None:
        self.text: list[int] = []
        self.link: list[int] = [-1]
        self.length: list[int] = [0]
        self.minend: list[int] = [0]
        self.next: list[dict[int, int]] = [{}]
        self.last = 0

    def extend(self, c: int) -> None:
        self.text.append(c)
        n = len(self.text)
        cur = len(self.length)
        self.length.append(n)
        self.minend.append(n)
        self.link.append(-1)
        self.next.append({})
        p = self.last
        while p != -1 and c not in self.next[p]:
            self.next[p][c] = cur
            p = self.link[p]
        if p == -1:
            self.link[cur] = 0
        else:
            q = self.next[p][c]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = len(self.length)
                self.length.append(self.length[p] + 1)
                self.minend.append(self.minend[q])
                self.link.append(self.link[q])
                self.next.append(dict(self.next[q]))
                while p != -1 and self.next[p].get(c) == q:
                    self.next[p][c] = clone
                    p = self.link[p]
                self.link[q] = clone
                self.link[cur] = clone
        self.last = cur


class DictCursor:
    def __init__(self, sam: DictAutomaton) -> None:
        self.sam = sam
        self.state = 0
        self.match_len = 0

    def feed(self, c: int) -> None:
        sam = self.sam
        s, ln = self.state, self.match_len
        while True:
            t = sam.next[s].get(c)
            if t is not None:
                s, ln = t, ln + 1
                break
            if s == 0:
                ln = 0
                break
            s = sam.link[s]
            ln = sam.length[s]
        self.state, self.match_len = s, ln

    def draft(self, n: int) -> list[int]:
        if self.match_len == 0:
            return []
        sam = self.sam
        s = self.state
        while len(sam.text) - sam.minend[s] < n and sam.link[s] > 0:
            s = sam.link[s]
        e = sam.minend[s]
        return sam.text[e : e + n]
